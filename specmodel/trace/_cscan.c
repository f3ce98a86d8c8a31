/* The compiled pre-filter of `specmodel ingest`: reads the events of a trace's `traceEvents`
 * array straight from the text buffer and hands the attribution only what it keeps.
 *
 * What it does per event (see specmodel/trace/_jsonstream.py and attribution.Collector):
 *   - validates the event's JSON (RFC 8259 grammar) without building anything it does not read;
 *   - events whose `ph` is not the collector's only_ph, or whose (cat, name) the collector's
 *     `decide` rejects, are counted only;
 *   - a GPU kernel / memcpy / memset, a kernel launch and, on a GPU trace, a collective's caller
 *     become the collector's tuples in C (appended to its lists); a host op of a CPU trace goes to
 *     a per-thread list of floats;
 *   - any other kept event becomes the dict json.loads would give, less the keys nobody reads,
 *     and is returned in order for Collector.on_event.
 * Anything it does not handle exactly as Python's json would -- an escape in a string it reads,
 * a non-ASCII byte, NaN/Infinity, an integer over 18 digits, a duplicated key it reads, a value
 * of an unusual type, invalid JSON, the first kernel of a trace (the collector's rules change
 * there) -- stops the scan at that event (SLOW): the caller reads that one event with the
 * standard library's decoder and Collector.on_event, which give the reference results and the
 * reference errors. Buffers holding characters beyond U+00FF are refused whole (WIDE).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* scan() statuses */
enum { ST_MORE = 0, ST_END = 1, ST_SLOW = 2, ST_WIDE = 3 };
/* parser results */
enum { J_OK = 0, J_SLOW = -1, J_MORE = -2, J_ERR = -3 };
/* value types (T_NONE: absent) */
enum { T_NONE = 0, T_STR, T_INT, T_FLT, T_TRUE, T_FALSE, T_NULL, T_OBJ, T_ARR };
/* top-level keys read */
enum { K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_ARGS, NK };
static const char *TOP_NAMES[NK] = {"ph", "cat", "name", "pid", "tid", "ts", "dur", "args"};
#define MAXA 32
#define SKIP_DEPTH 200
#define NUM_CHARS 64
#define EXACT_INT_DIGITS 18

typedef struct {
    const unsigned char *p; /* strings: the content (no quotes); else the literal's text */
    Py_ssize_t n;
    int t;
    int esc; /* a string with a backslash escape */
} Val;

typedef struct {
    uint32_t top_mask, arg_mask; /* which of top[] / arg[] were present (the rest are stale) */
    Val top[NK];
    Val arg[MAXA];
} Ev;

static const Val NONE_VAL = {NULL, 0, T_NONE, 0};
/* a key's value, or an absent one (no memset of ~1 kB per event) */
#define TOP(ev, k) ((((ev)->top_mask >> (k)) & 1u) ? &(ev)->top[k] : &NONE_VAL)
#define ARG(ev, q) ((((ev)->arg_mask >> (q)) & 1u) ? &(ev)->arg[q] : &NONE_VAL)

/* ---------------------------------------------------------------------------------------- */
/* a byte-keyed hash table: key bytes -> a strong reference */

typedef struct {
    uint64_t h;
    unsigned char *k; /* NULL: empty slot */
    Py_ssize_t n;
    PyObject *v;
} Slot;

typedef struct {
    Slot *s;
    size_t cap; /* a power of two */
    size_t used;
} Table;

static uint64_t load64(const unsigned char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* a word at a time (keys are kernel names of ~100 bytes, hashed twice per kernel) */
static uint64_t hash_bytes(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        h = (h ^ load64(p + i)) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    uint64_t t = 0;
    for (Py_ssize_t q = 0; i + q < n; q++)
        t |= (uint64_t)p[i + q] << (8 * q);
    h = (h ^ t) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

static void table_clear(Table *t) {
    if (t->s == NULL)
        return;
    for (size_t i = 0; i < t->cap; i++) {
        if (t->s[i].k != NULL) {
            PyMem_Free(t->s[i].k);
            Py_DECREF(t->s[i].v);
        }
    }
    PyMem_Free(t->s);
    t->s = NULL;
    t->cap = t->used = 0;
}

static PyObject *table_get(Table *t, const unsigned char *k, Py_ssize_t n, uint64_t h) {
    if (t->s == NULL)
        return NULL;
    size_t m = t->cap - 1;
    for (size_t i = h & m;; i = (i + 1) & m) {
        Slot *s = &t->s[i];
        if (s->k == NULL)
            return NULL;
        if (s->h == h && s->n == n && memcmp(s->k, k, (size_t)n) == 0)
            return s->v; /* borrowed */
    }
}

/* steals nothing: v is increfed. 0 ok, -1 memory error */
static int table_put(Table *t, const unsigned char *k, Py_ssize_t n, uint64_t h, PyObject *v) {
    if (t->used * 2 >= t->cap) {
        if (t->used >= (1u << 20))
            table_clear(t); /* (a trace with a million distinct names: start over, bounded) */
        size_t cap = t->cap ? t->cap * 2 : 1024;
        Slot *ns = PyMem_Calloc(cap, sizeof(Slot));
        if (ns == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (size_t i = 0; i < t->cap; i++) {
            Slot *o = &t->s[i];
            if (o->k == NULL)
                continue;
            size_t j = o->h & (cap - 1);
            while (ns[j].k != NULL)
                j = (j + 1) & (cap - 1);
            ns[j] = *o;
        }
        PyMem_Free(t->s);
        t->s = ns;
        t->cap = cap;
    }
    unsigned char *kc = PyMem_Malloc(n ? (size_t)n : 1);
    if (kc == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(kc, k, (size_t)n);
    size_t m = t->cap - 1;
    size_t i = h & m;
    while (t->s[i].k != NULL)
        i = (i + 1) & m;
    t->s[i].h = h;
    t->s[i].k = kc;
    t->s[i].n = n;
    Py_INCREF(v);
    t->s[i].v = v;
    t->used++;
    return 0;
}

/* a growable byte buffer for cache keys */
typedef struct {
    unsigned char *p;
    Py_ssize_t n, cap;
} Buf;

static int buf_put(Buf *b, const void *p, Py_ssize_t n) {
    if (b->n + n > b->cap) {
        Py_ssize_t cap = (b->n + n) * 2 + 256;
        unsigned char *q = PyMem_Realloc(b->p, (size_t)cap);
        if (q == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, (size_t)n);
    b->n += n;
    return 0;
}

/* a value's type tag and text, length-prefixed so that no two different values share a key */
static int buf_val(Buf *b, const Val *v) {
    unsigned char tag = (unsigned char)('A' + v->t);
    Py_ssize_t n = v->t == T_NONE ? 0 : v->n;
    if (buf_put(b, &tag, 1) < 0 || buf_put(b, &n, sizeof n) < 0)
        return -1;
    return n ? buf_put(b, v->p, n) : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* the grammar */

static Py_ssize_t INT_MAX_DIGITS = 4300; /* sys.get_int_max_str_digits() (0: no limit), set per scanner */
static unsigned char STR_STOP[256]; /* '"', '\\', control characters, non-ASCII */
static unsigned char IS_WS[256];

/* (s[n] is always readable: the buffer's NUL terminator, or a closing bracket inside it. So a
 * space at s[i] means i < n: a re-walk of a validated container never skips white space at its
 * end, its closing bracket comes first) */
/* (Kineto writes one space after ':' and ',': that case first, the loop only for more) */
#define SKIP_WS(s, i, n)                                                                        \
    do {                                                                                        \
        if ((s)[i] == ' ')                                                                      \
            (i)++;                                                                              \
        if (IS_WS[(s)[i]])                                                                      \
            while (IS_WS[(s)[i]] && (i) < (n))                                                  \
                (i)++;                                                                          \
    } while (0)

static int is_hex(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* s[*i] == '"'. On J_OK *i is past the closing quote. */
static inline __attribute__((always_inline)) int parse_string(const unsigned char *s, Py_ssize_t *i, Py_ssize_t n, Val *v) {
    Py_ssize_t j = *i + 1;
    int esc = 0;
    for (;;) {
#ifdef __SSE2__
        /* 16 bytes at a time: the first '"', '\\', control (below 0x20) or non-ASCII byte (a signed
         * byte below 0x20 is either) */
        while (j + 16 <= n) {
            __m128i w = _mm_loadu_si128((const __m128i *)(const void *)(s + j));
            __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(w, _mm_set1_epi8('"')),
                                                    _mm_cmpeq_epi8(w, _mm_set1_epi8('\\'))),
                                       _mm_cmplt_epi8(w, _mm_set1_epi8(0x20)));
            int m = _mm_movemask_epi8(hit);
            if (m) {
                j += __builtin_ctz((unsigned)m);
                goto stop; /* (exact: s[j] is the first such byte) */
            }
            j += 16;
        }
#endif
        /* 8 bytes at a time while none is '"', '\\', below 0x20 or above 0x7f (no false negatives) */
        while (j + 8 <= n) {
            uint64_t w = load64(s + j);
            uint64_t q = w ^ 0x2222222222222222ULL, b = w ^ 0x5C5C5C5C5C5C5C5CULL;
            uint64_t hit = (((q - 0x0101010101010101ULL) & ~q) | ((b - 0x0101010101010101ULL) & ~b) |
                            ((w - 0x2020202020202020ULL) & ~w) | w) & 0x8080808080808080ULL;
            if (hit) { /* the lowest flag is exact (false ones only follow a true one): jump there */
                j += __builtin_ctzll(hit) >> 3;
                break;
            }
            j += 8;
        }
        while (j < n && !STR_STOP[s[j]])
            j++;
#ifdef __SSE2__
    stop:
#endif
        if (j >= n)
            return J_MORE;
        unsigned char c = s[j];
        if (c == '"')
            break;
        if (c != '\\')
            return J_SLOW; /* a control character (invalid JSON) or a non-ASCII one */
        esc = 1;
        if (j + 1 >= n)
            return J_MORE;
        c = s[j + 1];
        if (c == 'u') {
            if (j + 5 >= n)
                return J_MORE;
            if (!(is_hex(s[j + 2]) && is_hex(s[j + 3]) && is_hex(s[j + 4]) && is_hex(s[j + 5])))
                return J_SLOW;
            j += 6;
        } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
                   c == 't') {
            j += 2;
        } else {
            return J_SLOW;
        }
    }
    v->p = s + *i + 1;
    v->n = j - (*i + 1);
    v->t = T_STR;
    v->esc = esc;
    *i = j + 1;
    return J_OK;
}

/* the end of the run of digits at s[j] (8 bytes at a time: a byte is a digit iff its high nibble
 * is 3 and so is that of the byte + 6; a carry out of a non-digit byte can only mark later bytes) */
static inline Py_ssize_t digits_end(const unsigned char *s, Py_ssize_t j, Py_ssize_t n) {
    while (j + 8 <= n) {
        uint64_t w = load64(s + j);
        uint64_t bad = ((w & 0xF0F0F0F0F0F0F0F0ULL) ^ 0x3030303030303030ULL) |
                       (((w + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) ^ 0x3030303030303030ULL);
        if (bad)
            return j + (__builtin_ctzll(bad) >> 3);
        j += 8;
    }
    while (j < n && s[j] >= '0' && s[j] <= '9')
        j++;
    return j;
}

/* one or more digits (a fraction's, an exponent's) */
static inline int skip_digits(const unsigned char *s, Py_ssize_t *j, Py_ssize_t n) {
    Py_ssize_t d = *j;
    *j = digits_end(s, *j, n);
    if (*j >= n)
        return J_MORE;
    return *j == d ? J_SLOW : J_OK;
}

static inline __attribute__((always_inline)) int parse_number(const unsigned char *s, Py_ssize_t *i, Py_ssize_t n, Val *v) {
    Py_ssize_t j = *i;
    int flt = 0;
    if (j < n && s[j] == '-')
        j++;
    if (j >= n)
        return J_MORE;
    if (s[j] == '0') {
        j++;
    } else if (s[j] >= '1' && s[j] <= '9') {
        j = digits_end(s, j + 1, n);
        if (j >= n)
            return J_MORE;
        /* an integer over Python's int-string limit: json.loads refuses it even where nobody
         * reads it, so the reference must see it (its error) */
        if (INT_MAX_DIGITS > 0 && j - *i - (s[*i] == '-') > INT_MAX_DIGITS && s[j] != '.' && s[j] != 'e' &&
            s[j] != 'E')
            return J_SLOW;
    } else {
        return J_SLOW; /* '-Infinity', '-' alone, ... */
    }
    int r;
    if (j < n && s[j] == '.') {
        flt = 1;
        j++;
        if ((r = skip_digits(s, &j, n)) != J_OK)
            return r;
    }
    if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        flt = 1;
        j++;
        if (j < n && (s[j] == '+' || s[j] == '-'))
            j++;
        if ((r = skip_digits(s, &j, n)) != J_OK)
            return r;
    }
    if (j >= n)
        return J_MORE; /* the number may go on in the next chunk */
    v->p = s + *i;
    v->n = j - *i;
    v->t = flt ? T_FLT : T_INT;
    v->esc = 0;
    *i = j;
    return J_OK;
}

static int parse_literal(const unsigned char *s, Py_ssize_t *i, Py_ssize_t n, Val *v) {
    static const char *lits[3] = {"true", "false", "null"};
    static const int types[3] = {T_TRUE, T_FALSE, T_NULL};
    int k = s[*i] == 't' ? 0 : s[*i] == 'f' ? 1 : s[*i] == 'n' ? 2 : -1;
    if (k < 0)
        return J_SLOW; /* NaN, Infinity (Python's json reads them: the reference decides) */
    Py_ssize_t len = (Py_ssize_t)strlen(lits[k]);
    for (Py_ssize_t q = 0; q < len; q++) {
        if (*i + q >= n)
            return J_MORE;
        if (s[*i + q] != (unsigned char)lits[k][q])
            return J_SLOW;
    }
    v->p = s + *i;
    v->n = len;
    v->t = types[k];
    v->esc = 0;
    *i += len;
    return J_OK;
}

static int skip_value(const unsigned char *s, Py_ssize_t *i, Py_ssize_t n, int depth, Val *v);

/* `"key" : ` at s[*j], leaving *j at the value. ``allow_esc`` 0: J_SLOW for an escaped key (where
 * keys are matched, an escape could spell one that is read) */
static inline __attribute__((always_inline)) int parse_key(const unsigned char *s, Py_ssize_t *j, Py_ssize_t n,
                                                           Val *key, int allow_esc) {
    int r;
    if (s[*j] != '"')
        return J_SLOW;
    if ((r = parse_string(s, j, n, key)) != J_OK)
        return r;
    if (key->esc && !allow_esc)
        return J_SLOW;
    if (s[*j] != ':' || *j >= n) { /* (Kineto writes the ':' straight after the key) */
        SKIP_WS(s, *j, n);
        if (*j >= n)
            return J_MORE;
        if (s[*j] != ':')
            return J_SLOW;
    }
    (*j)++;
    SKIP_WS(s, *j, n);
    return *j >= n ? J_MORE : J_OK;
}

/* after a member or an element: ',' (1: another follows, *j at it), `close` (0: *j at it), else
 * J_SLOW / J_MORE */
static inline __attribute__((always_inline)) int next_member(const unsigned char *s, Py_ssize_t *j, Py_ssize_t n,
                                                             unsigned char close) {
    if (*j >= n || (s[*j] != ',' && s[*j] != close)) { /* (the separator straight after the value) */
        SKIP_WS(s, *j, n);
        if (*j >= n)
            return J_MORE;
    }
    if (s[*j] == ',') {
        (*j)++;
        SKIP_WS(s, *j, n);
        return *j >= n ? J_MORE : 1;
    }
    return s[*j] == close ? 0 : J_SLOW;
}

/* s[*i] is '{' or '['; validates the container and records its whole text */
static int skip_container(const unsigned char *s, Py_ssize_t *i, Py_ssize_t n, int depth, Val *v) {
    if (depth > SKIP_DEPTH)
        return J_SLOW;
    Py_ssize_t start = *i;
    int obj = s[*i] == '{';
    unsigned char close = obj ? '}' : ']';
    Py_ssize_t j = *i + 1;
    Val tmp;
    int r;
    SKIP_WS(s, j, n);
    if (j >= n)
        return J_MORE;
    if (s[j] != close) {
        for (;;) {
            if (obj && (r = parse_key(s, &j, n, &tmp, 1)) != J_OK)
                return r;
            if ((r = skip_value(s, &j, n, depth + 1, &tmp)) != J_OK)
                return r;
            if ((r = next_member(s, &j, n, close)) < 0)
                return r;
            if (r == 0)
                break;
        }
    }
    j++;
    v->p = s + start;
    v->n = j - start;
    v->t = obj ? T_OBJ : T_ARR;
    v->esc = 0;
    *i = j;
    return J_OK;
}

static int skip_value(const unsigned char *s, Py_ssize_t *i, Py_ssize_t n, int depth, Val *v) {
    if (*i >= n)
        return J_MORE;
    unsigned char c = s[*i];
    if (c == '"')
        return parse_string(s, i, n, v);
    if (c == '{' || c == '[')
        return skip_container(s, i, n, depth, v);
    if (c == '-' || (c >= '0' && c <= '9'))
        return parse_number(s, i, n, v);
    return parse_literal(s, i, n, v);
}

/* the top-level keys read: by length and first letter, no loop */
static int match_top(const Val *k) {
    const unsigned char *p = k->p;
    switch (k->n) {
    case 2:
        if (p[0] == 'p' && p[1] == 'h')
            return K_PH;
        if (p[0] == 't' && p[1] == 's')
            return K_TS;
        return -1;
    case 3:
        if (p[0] == 'c' && p[1] == 'a' && p[2] == 't')
            return K_CAT;
        if (p[0] == 'p' && p[1] == 'i' && p[2] == 'd')
            return K_PID;
        if (p[0] == 't' && p[1] == 'i' && p[2] == 'd')
            return K_TID;
        if (p[0] == 'd' && p[1] == 'u' && p[2] == 'r')
            return K_DUR;
        return -1;
    case 4:
        if (memcmp(p, "name", 4) == 0)
            return K_NAME;
        if (memcmp(p, "args", 4) == 0)
            return K_ARGS;
        return -1;
    default:
        return -1;
    }
}

#define MAX_KEY_LEN 64
typedef struct {
    int n_args;
    const char *args[MAXA];
    Py_ssize_t args_len[MAXA];
    uint32_t by_len[MAX_KEY_LEN + 1]; /* the args keys of each length (a bit per index) */
} Keys;

/* an args key read: its index, else -1 (most keys of a trace are of no length read) */
static inline int match_arg(const Keys *keys, const Val *k) {
    if (k->n > MAX_KEY_LEN)
        return -1;
    for (uint32_t m = keys->by_len[k->n]; m; m &= m - 1) {
        int q = __builtin_ctz(m);
        if (keys->args[q][0] == (char)k->p[0] && memcmp(keys->args[q], k->p, (size_t)k->n) == 0)
            return q;
    }
    return -1;
}

/* s[*i] == '{' (an event). Fills ev; J_SLOW for a duplicated key that is read, an escaped key. */
static int parse_event(const unsigned char *s, Py_ssize_t *i, Py_ssize_t n, const Keys *keys, Ev *ev) {
    Py_ssize_t j = *i + 1;
    Val key, tmp;
    int r;
    ev->top_mask = ev->arg_mask = 0;
    SKIP_WS(s, j, n);
    if (j >= n)
        return J_MORE;
    if (s[j] == '}') {
        *i = j + 1;
        return J_OK;
    }
    for (;;) {
        if ((r = parse_key(s, &j, n, &key, 0)) != J_OK)
            return r;
        int k = match_top(&key);
        if (k < 0) {
            if ((r = skip_value(s, &j, n, 1, &tmp)) != J_OK)
                return r;
        } else {
            if ((ev->top_mask >> k) & 1u)
                return J_SLOW; /* json.loads keeps the last: the reference reads it */
            if (k == K_ARGS && s[j] == '{') {
                /* args: record the keys read, validate the rest */
                Py_ssize_t a0 = j;
                j++;
                SKIP_WS(s, j, n);
                if (j >= n)
                    return J_MORE;
                if (s[j] != '}') {
                    for (;;) {
                        if ((r = parse_key(s, &j, n, &key, 0)) != J_OK)
                            return r;
                        int a = match_arg(keys, &key);
                        Val *dst = a >= 0 ? &ev->arg[a] : &tmp;
                        if (a >= 0 && ((ev->arg_mask >> a) & 1u))
                            return J_SLOW;
                        if ((r = skip_value(s, &j, n, 2, dst)) != J_OK)
                            return r;
                        if (a >= 0)
                            ev->arg_mask |= 1u << a;
                        if ((r = next_member(s, &j, n, '}')) < 0)
                            return r;
                        if (r == 0)
                            break;
                    }
                }
                j++;
                ev->top[K_ARGS].p = s + a0;
                ev->top[K_ARGS].n = j - a0;
                ev->top[K_ARGS].t = T_OBJ;
                ev->top_mask |= 1u << K_ARGS;
            } else {
                if ((r = skip_value(s, &j, n, 1, &ev->top[k])) != J_OK)
                    return r;
                ev->top_mask |= 1u << k;
            }
        }
        if ((r = next_member(s, &j, n, '}')) < 0)
            return r;
        if (r == 0)
            break;
    }
    *i = j + 1;
    return J_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* values -> Python objects, as json.loads gives them (NULL + no exception: not handled here) */

static PyObject *build(const Val *v, int depth);

static PyObject *build_int(const Val *v) {
    const unsigned char *p = v->p;
    Py_ssize_t n = v->n;
    int neg = 0;
    if (n && *p == '-') {
        neg = 1;
        p++;
        n--;
    }
    if (n > EXACT_INT_DIGITS)
        return NULL; /* (Python's int limit, and exactness beyond int64: the reference) */
    long long x = 0;
    for (Py_ssize_t q = 0; q < n; q++)
        x = x * 10 + (p[q] - '0');
    return PyLong_FromLongLong(neg ? -x : x);
}

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                  1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Clinger's exact case: digits m < 2^53 and |e| <= 22, so m and 10^|e| are exact doubles and one
 * IEEE multiplication or division rounds correctly: the value strtod (float()) gives, bit for bit.
 * 0 done, -1 not this case. (Trace timestamps have ~16 digits: strtod's big-number path otherwise.) */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* the value of 8 ASCII digits (fast_float's parse_eight_digits_unrolled: pairs, then quads) */
static inline uint32_t eight_digits(const unsigned char *p) {
    uint64_t w = load64(p) - 0x3030303030303030ULL;
    w = w * 10 + (w >> 8);
    w = (((w & 0x000000FF000000FFULL) * 0x000F424000000064ULL) +
         (((w >> 16) & 0x000000FF000000FFULL) * 0x0000271000000001ULL)) >> 32;
    return (uint32_t)w;
}
#endif

/* m followed by the digits [p, q) (at most 19 in all: no overflow) */
static inline uint64_t more_digits(uint64_t m, const unsigned char *p, const unsigned char *q) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; q - p >= 8; p += 8)
        m = m * 100000000ULL + eight_digits(p);
#endif
    for (; p < q; p++)
        m = m * 10 + (uint64_t)(*p - '0');
    return m;
}

static int fast_double(const Val *v, double *out) {
    const unsigned char *p = v->p, *end = v->p + v->n;
    int neg = 0, digits = 0, frac = 0, seen_dot = 0;
    uint64_t m = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    { /* the common case, validated text of at most 19 digits: a run at a time */
        const unsigned char *q = p, *f0 = NULL, *f1 = NULL;
        while (q < end && *q >= '0' && *q <= '9')
            q++;
        const unsigned char *i1 = q;
        if (q < end && *q == '.') {
            f0 = ++q;
            while (q < end && *q >= '0' && *q <= '9')
                q++;
            f1 = q;
        }
        if ((i1 - p) + (f1 - f0) <= 19) {
            m = more_digits(0, p, i1);
            if (f0 != NULL)
                m = more_digits(m, f0, f1);
            frac = (int)(f1 - f0);
            p = q;
            goto exponent;
        }
    }
    for (; p < end; p++) {
        unsigned char c = *p;
        if (c >= '0' && c <= '9') {
            if (m || c != '0')
                digits++;
            if (digits > 19)
                return -1;
            m = m * 10 + (uint64_t)(c - '0');
            frac += seen_dot;
        } else if (c == '.') {
            seen_dot = 1;
        } else {
            break; /* an exponent */
        }
    }
exponent:;
    int e = 0;
    if (p < end) { /* [eE][+-]?digits */
        int eneg = 0, ed = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        for (; p < end; p++) {
            if (++ed > 4)
                return -1;
            e = e * 10 + (*p - '0');
        }
        if (eneg)
            e = -e;
    }
    e -= frac;
    if (m > (1ULL << 53) || e < -22 || e > 22)
        return -1;
    double d = (double)m;
    d = e < 0 ? d / POW10[-e] : d * POW10[e];
    *out = neg ? -d : d;
    return 0;
}

/* a number's value as float(): 0 ok (in *out), -1 not handled */
static int num_double(const Val *v, double *out) {
    char tmp[NUM_CHARS + 1];
    if (v->t != T_INT && v->t != T_FLT)
        return -1;
    if (fast_double(v, out) == 0)
        return 0;
    if (v->n > NUM_CHARS)
        return -1;
    if (v->t == T_INT) {
        Py_ssize_t digits = v->n - (v->p[0] == '-');
        if (digits > EXACT_INT_DIGITS)
            return -1;
    }
    memcpy(tmp, v->p, (size_t)v->n);
    tmp[v->n] = '\0';
    char *end = NULL;
    /* the function float() and json use: the same rounding, inf on overflow */
    double d = PyOS_string_to_double(tmp, &end, NULL);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    if (end != tmp + v->n)
        return -1;
    *out = d;
    return 0;
}

static PyObject *build_container(const Val *v, int depth) {
    /* re-walk the validated text, building as json.loads does */
    const unsigned char *s = v->p;
    Py_ssize_t n = v->n, j = 1;
    int obj = s[0] == '{';
    PyObject *out = obj ? PyDict_New() : PyList_New(0);
    if (out == NULL)
        return NULL;
    Val key, item;
    SKIP_WS(s, j, n);
    if (s[j] == (obj ? '}' : ']'))
        return out;
    for (;;) {
        PyObject *k = NULL;
        if (obj) {
            if (parse_string(s, &j, n, &key) != J_OK || key.esc)
                goto fail;
            k = PyUnicode_DecodeASCII((const char *)key.p, key.n, NULL);
            if (k == NULL)
                goto fail;
            SKIP_WS(s, j, n);
            j++; /* ':' */
            SKIP_WS(s, j, n);
        }
        if (skip_value(s, &j, n, depth + 1, &item) != J_OK) {
            Py_XDECREF(k);
            goto fail;
        }
        PyObject *x = build(&item, depth + 1);
        if (x == NULL) {
            Py_XDECREF(k);
            goto fail;
        }
        int rc = obj ? PyDict_SetItem(out, k, x) : PyList_Append(out, x);
        Py_XDECREF(k);
        Py_DECREF(x);
        if (rc < 0)
            goto fail;
        SKIP_WS(s, j, n);
        if (s[j] == ',') {
            j++;
            SKIP_WS(s, j, n);
            continue;
        }
        break;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *build(const Val *v, int depth) {
    switch (v->t) {
    case T_STR:
        if (v->esc)
            return NULL;
        return PyUnicode_DecodeASCII((const char *)v->p, v->n, NULL);
    case T_INT:
        return build_int(v);
    case T_FLT: {
        double d;
        if (num_double(v, &d) < 0)
            return NULL;
        return PyFloat_FromDouble(d);
    }
    case T_TRUE:
        Py_RETURN_TRUE;
    case T_FALSE:
        Py_RETURN_FALSE;
    case T_NULL:
        Py_RETURN_NONE;
    case T_OBJ:
    case T_ARR:
        return build_container(v, depth);
    default:
        return NULL;
    }
}

static int is_scalar(const Val *v) { return v->t != T_OBJ && v->t != T_ARR; }

static int str_is(const Val *v, const char *lit) {
    Py_ssize_t n = (Py_ssize_t)strlen(lit);
    return v->t == T_STR && !v->esc && v->n == n && memcmp(v->p, lit, (size_t)n) == 0;
}

/* ---------------------------------------------------------------------------------------- */
/* the scanner object */

/* decision codes */
enum { D_SKIP = 0, D_KEEP = 1, D_HOST = 2, D_COLL = 3, D_ARG = 4 /* + args index */ };

typedef struct {
    PyObject_HEAD
    PyObject *decide;   /* (ph, cat, name) -> True | False | host_op | coll_or_host | args key */
    PyObject *info;     /* (cpu: bool, name, args dict) -> None | (collective, implementation, bytes) */
    PyObject *missing;  /* what decide is given for an absent key */
    PyObject *host_op;  /* the HOST_OP decision */
    PyObject *coll_or_host; /* the COLLECTIVE_OR_HOST_OP decision */
    PyObject *kernels, *launches, *cpu_colls; /* the collector's lists */
    PyObject *hosts;    /* (pid, tid) -> bytearray of doubles: start, end, ... */
    PyObject *only_ph;  /* str */
    const char *only;   /* its ASCII text */
    Py_ssize_t only_n;
    PyObject *empty;    /* "" */
    PyObject *zero;     /* 0 */
    Keys keys;
    PyObject *args_keys; /* tuple of str */
    int a_corr, a_coll, a_ext, a_seq, a_pg, a_nel, a_dtype, a_dims, a_types;
    Table decisions;    /* (cat, name) text -> decision code (an int object) */
    Table infos;        /* kind, name, args text -> info result */
    int decided_with_kernels; /* the n_kernels > 0 the decision table was filled under */
    Buf key;
    PyObject *last_pid;  /* the last kept event's pid object, and its text: consecutive events share it */
    Buf last_pid_key;
    PyObject *last_host; /* the bytearray of the last host op's thread (a strong reference) */
    Buf last_host_key;
} Scanner;

static void Scanner_dealloc(Scanner *self) {
    table_clear(&self->decisions);
    table_clear(&self->infos);
    PyMem_Free(self->key.p);
    PyMem_Free(self->last_host_key.p);
    Py_XDECREF(self->last_host);
    PyMem_Free(self->last_pid_key.p);
    Py_XDECREF(self->last_pid);
    Py_XDECREF(self->decide);
    Py_XDECREF(self->info);
    Py_XDECREF(self->missing);
    Py_XDECREF(self->host_op);
    Py_XDECREF(self->coll_or_host);
    Py_XDECREF(self->kernels);
    Py_XDECREF(self->launches);
    Py_XDECREF(self->cpu_colls);
    Py_XDECREF(self->hosts);
    Py_XDECREF(self->only_ph);
    Py_XDECREF(self->empty);
    Py_XDECREF(self->zero);
    Py_XDECREF(self->args_keys);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int arg_index(Scanner *self, const char *name) {
    for (int q = 0; q < self->keys.n_args; q++)
        if (strcmp(self->keys.args[q], name) == 0)
            return q;
    return -1;
}

static int Scanner_init(Scanner *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"decide", "info", "missing", "host_op", "coll_or_host", "args_keys", "only_ph",
                             "kernels", "launches", "cpu_colls", "hosts", "int_max_digits", NULL};
    PyObject *decide, *info, *missing, *host_op, *coll_or_host, *args_keys, *only_ph, *kernels, *launches,
        *cpu_colls, *hosts;
    Py_ssize_t int_max_digits = 4300;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOO!UO!O!O!O!|n", kwlist, &decide, &info, &missing,
                                     &host_op, &coll_or_host, &PyTuple_Type, &args_keys, &only_ph, &PyList_Type,
                                     &kernels, &PyList_Type, &launches, &PyList_Type, &cpu_colls,
                                     &PyDict_Type, &hosts, &int_max_digits))
        return -1;
    INT_MAX_DIGITS = int_max_digits;
    Py_ssize_t na = PyTuple_GET_SIZE(args_keys);
    if (na > MAXA) {
        PyErr_SetString(PyExc_ValueError, "too many args keys");
        return -1;
    }
    self->keys.n_args = (int)na;
    for (Py_ssize_t q = 0; q < na; q++) {
        PyObject *k = PyTuple_GET_ITEM(args_keys, q);
        if (!PyUnicode_Check(k) || !PyUnicode_IS_ASCII(k)) {
            PyErr_SetString(PyExc_ValueError, "args keys must be ASCII str");
            return -1;
        }
        self->keys.args[q] = PyUnicode_AsUTF8AndSize(k, &self->keys.args_len[q]);
        if (self->keys.args_len[q] > MAX_KEY_LEN) {
            PyErr_SetString(PyExc_ValueError, "an args key is too long");
            return -1;
        }
    }
    memset(self->keys.by_len, 0, sizeof self->keys.by_len);
    for (int q = 0; q < self->keys.n_args; q++)
        self->keys.by_len[self->keys.args_len[q]] |= 1u << q;
#define SET(field, v)                                                                            \
    do {                                                                                         \
        Py_INCREF(v);                                                                            \
        Py_XSETREF(self->field, v);                                                              \
    } while (0)
    SET(decide, decide);
    SET(info, info);
    SET(missing, missing);
    SET(host_op, host_op);
    SET(coll_or_host, coll_or_host);
    SET(args_keys, args_keys);
    SET(only_ph, only_ph);
    self->only = PyUnicode_AsUTF8AndSize(only_ph, &self->only_n);
    if (self->only == NULL)
        return -1;
    SET(kernels, kernels);
    SET(launches, launches);
    SET(cpu_colls, cpu_colls);
    SET(hosts, hosts);
#undef SET
    Py_XSETREF(self->empty, PyUnicode_FromString(""));
    Py_XSETREF(self->zero, PyLong_FromLong(0));
    if (self->empty == NULL || self->zero == NULL)
        return -1;
    self->a_corr = arg_index(self, "correlation");
    self->a_coll = arg_index(self, "Collective name");
    self->a_ext = arg_index(self, "External id");
    self->a_seq = arg_index(self, "Seq");
    self->a_pg = arg_index(self, "Process Group Name");
    self->a_nel = arg_index(self, "In msg nelems");
    self->a_dtype = arg_index(self, "dtype");
    self->a_dims = arg_index(self, "Input Dims");
    self->a_types = arg_index(self, "Input type");
    if (self->a_corr < 0 || self->a_coll < 0 || self->a_seq < 0 || self->a_pg < 0 || self->a_nel < 0 ||
        self->a_dtype < 0 || self->a_dims < 0 || self->a_types < 0) {
        PyErr_SetString(PyExc_ValueError, "args keys lack one the compiled path reads");
        return -1;
    }
    table_clear(&self->decisions);
    table_clear(&self->infos);
    self->decided_with_kernels = -1;
    return 0;
}

/* an absent value -> `missing` (for decide), else the built value (NULL: not handled) */
static PyObject *build_or_missing(Scanner *self, const Val *v) {
    if (v->t == T_NONE) {
        Py_INCREF(self->missing);
        return self->missing;
    }
    return build(v, 0);
}

/* an absent value -> None (dict.get), else the built scalar */
static PyObject *build_or_none(const Val *v) {
    if (v->t == T_NONE)
        Py_RETURN_NONE;
    return build(v, 0);
}

/* the pid of a kept event (a new reference; NULL + no error: not handled): one object for a run
 * of events with the same pid text (a launch's pid is the process id: a new int each time else) */
static PyObject *pid_of(Scanner *self, const Ev *ev) {
    const Val *v = TOP(ev, K_PID);
    self->key.n = 0;
    if (buf_val(&self->key, v) < 0)
        return NULL;
    if (self->last_pid != NULL && self->key.n == self->last_pid_key.n &&
        memcmp(self->key.p, self->last_pid_key.p, (size_t)self->key.n) == 0) {
        Py_INCREF(self->last_pid);
        return self->last_pid;
    }
    PyObject *pid = build_or_none(v);
    if (pid == NULL)
        return NULL;
    self->last_pid_key.n = 0;
    if (buf_put(&self->last_pid_key, self->key.p, self->key.n) < 0) {
        Py_DECREF(pid);
        return NULL;
    }
    Py_INCREF(pid);
    Py_XSETREF(self->last_pid, pid);
    return pid;
}

/* the decision code for (cat, name): -1 error, -2 not handled (SLOW) */
static int decision(Scanner *self, const Ev *ev) {
    const Val *cat = TOP(ev, K_CAT), *name = TOP(ev, K_NAME);
    if (!is_scalar(cat) || !is_scalar(name) || cat->esc || name->esc)
        return -2;
    self->key.n = 0;
    if (buf_val(&self->key, cat) < 0 || buf_val(&self->key, name) < 0)
        return -1;
    uint64_t h = hash_bytes(self->key.p, self->key.n);
    PyObject *d = table_get(&self->decisions, self->key.p, self->key.n, h);
    if (d != NULL)
        return (int)PyLong_AsLong(d);
    PyObject *c = build_or_missing(self, cat);
    if (c == NULL)
        return PyErr_Occurred() ? -1 : -2;
    PyObject *nm = build_or_missing(self, name);
    if (nm == NULL) {
        Py_DECREF(c);
        return PyErr_Occurred() ? -1 : -2;
    }
    PyObject *res = PyObject_CallFunctionObjArgs(self->decide, self->only_ph, c, nm, NULL);
    Py_DECREF(c);
    Py_DECREF(nm);
    if (res == NULL)
        return -1;
    long code;
    if (res == Py_True)
        code = D_KEEP;
    else if (res == Py_False)
        code = D_SKIP;
    else if (res == self->host_op)
        code = D_HOST;
    else if (res == self->coll_or_host)
        code = D_COLL;
    else {
        code = -1;
        if (PyUnicode_Check(res)) {
            for (int q = 0; q < self->keys.n_args; q++) {
                if (PyUnicode_CompareWithASCIIString(res, self->keys.args[q]) == 0) {
                    code = D_ARG + q;
                    break;
                }
            }
        }
        if (code < 0) {
            Py_DECREF(res);
            PyErr_SetString(PyExc_ValueError, "decide returned an unknown decision");
            return -1;
        }
    }
    Py_DECREF(res);
    PyObject *co = PyLong_FromLong(code);
    if (co == NULL)
        return -1;
    int rc = table_put(&self->decisions, self->key.p, self->key.n, h, co);
    Py_DECREF(co);
    return rc < 0 ? -1 : (int)code;
}

/* ts and dur as the collector reads them (float(ts), float(dur or 0.0)): 0 ok, -2 not handled */
static int times(const Ev *ev, double *t0, double *d) {
    if (num_double(TOP(ev, K_TS), t0) < 0)
        return -2;
    if (TOP(ev, K_DUR)->t == T_NONE)
        *d = 0.0;
    else if (num_double(TOP(ev, K_DUR), d) < 0)
        return -2;
    if (!isfinite(*t0) || !isfinite(*d) || *d < 0)
        return -2; /* the reference names the bad value */
    return 0;
}

/* (kind, name, the args info reads) -> the info callback's result (borrowed; NULL + no error:
 * not handled) */
static PyObject *info_of(Scanner *self, int cpu, const Ev *ev, const Val *name) {
    const int idx[5] = {self->a_coll, self->a_nel, self->a_dtype, self->a_dims, self->a_types};
    unsigned char tag = cpu ? 'c' : 'k';
    self->key.n = 0;
    if (buf_put(&self->key, &tag, 1) < 0 || buf_val(&self->key, name) < 0)
        return NULL;
    for (int q = 0; q < 5; q++)
        if (buf_val(&self->key, ARG(ev, idx[q])) < 0)
            return NULL;
    uint64_t h = hash_bytes(self->key.p, self->key.n);
    PyObject *got = table_get(&self->infos, self->key.p, self->key.n, h);
    if (got != NULL)
        return got;
    PyObject *nm = name->t == T_NONE ? (Py_INCREF(self->empty), self->empty) : build(name, 0);
    if (nm == NULL)
        return NULL;
    PyObject *args = PyDict_New();
    if (args == NULL) {
        Py_DECREF(nm);
        return NULL;
    }
    for (int q = 0; q < 5; q++) {
        const Val *v = ARG(ev, idx[q]);
        if (v->t == T_NONE)
            continue;
        PyObject *x = build(v, 0);
        if (x == NULL || PyDict_SetItemString(args, self->keys.args[idx[q]], x) < 0) {
            Py_XDECREF(x);
            Py_DECREF(args);
            Py_DECREF(nm);
            return NULL;
        }
        Py_DECREF(x);
    }
    PyObject *res = PyObject_CallFunctionObjArgs(self->info, cpu ? Py_True : Py_False, nm, args, NULL);
    Py_DECREF(nm);
    Py_DECREF(args);
    if (res == NULL)
        return NULL;
    if (res != Py_None && !(PyTuple_Check(res) && PyTuple_GET_SIZE(res) == 3)) {
        Py_DECREF(res);
        PyErr_SetString(PyExc_ValueError, "info must return None or a 3-tuple");
        return NULL;
    }
    int rc = table_put(&self->infos, self->key.p, self->key.n, h, res);
    Py_DECREF(res);
    return rc < 0 ? NULL : table_get(&self->infos, self->key.p, self->key.n, h);
}

/* the event as the dict json.loads gives, less the keys nobody reads (NULL + no error: not handled) */
static PyObject *event_dict(Scanner *self, const Ev *ev) {
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    for (int k = 0; k < NK; k++) {
        const Val *v = TOP(ev, k);
        if (v->t == T_NONE)
            continue;
        PyObject *x;
        if (k == K_ARGS && v->t == T_OBJ) {
            x = PyDict_New();
            if (x == NULL)
                goto fail;
            for (int q = 0; q < self->keys.n_args; q++) {
                const Val *a = ARG(ev, q);
                if (a->t == T_NONE)
                    continue;
                PyObject *y = build(a, 1);
                if (y == NULL || PyDict_SetItem(x, PyTuple_GET_ITEM(self->args_keys, q), y) < 0) {
                    Py_XDECREF(y);
                    Py_DECREF(x);
                    goto fail;
                }
                Py_DECREF(y);
            }
        } else {
            x = build(v, 0);
        }
        if (x == NULL || PyDict_SetItemString(d, TOP_NAMES[k], x) < 0) {
            Py_XDECREF(x);
            goto fail;
        }
        Py_DECREF(x);
    }
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

/* the tuples kept hold scalars only (and such a tuple): in no cycle, so the collector need not
 * walk the hundreds of thousands a trace keeps (what CPython does lazily for such tuples) */
static PyObject *untracked(PyObject *tup) {
    if (tup != NULL && PyObject_GC_IsTracked(tup))
        PyObject_GC_UnTrack(tup);
    return tup;
}

static int append_new(PyObject *list, PyObject *item) {
    if (item == NULL)
        return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

/* an event's pid (the one object of a run of equal pids with `cached`, else a new one) and tid
 * (new references; None where absent): 0, or -1 error / -2 not handled with neither set */
static int ids_of(Scanner *self, const Ev *ev, int cached, PyObject **pid, PyObject **tid) {
    *pid = cached ? pid_of(self, ev) : build_or_none(TOP(ev, K_PID));
    if (*pid == NULL)
        return PyErr_Occurred() ? -1 : -2;
    *tid = build_or_none(TOP(ev, K_TID));
    if (*tid == NULL) {
        Py_CLEAR(*pid);
        return PyErr_Occurred() ? -1 : -2;
    }
    return 0;
}

/* one host op: (pid, tid) -> a bytearray of doubles start, end, ... (consecutive ops mostly share
 * a thread: the last key's text is compared before a tuple is built and looked up) */
static int host_op(Scanner *self, const Ev *ev, double t0, double d) {
    self->key.n = 0;
    if (buf_val(&self->key, TOP(ev, K_PID)) < 0 || buf_val(&self->key, TOP(ev, K_TID)) < 0)
        return -1;
    if (self->last_host == NULL || self->key.n != self->last_host_key.n ||
        memcmp(self->key.p, self->last_host_key.p, (size_t)self->key.n) != 0) {
        PyObject *pid, *tid;
        int rc = ids_of(self, ev, 0, &pid, &tid);
        if (rc < 0)
            return rc;
        PyObject *key = PyTuple_Pack(2, pid, tid);
        Py_DECREF(pid);
        Py_DECREF(tid);
        if (key == NULL)
            return -1;
        PyObject *ba = PyDict_GetItemWithError(self->hosts, key);
        if (ba == NULL) {
            if (PyErr_Occurred()) {
                Py_DECREF(key);
                return -1;
            }
            ba = PyByteArray_FromStringAndSize(NULL, 0);
            if (ba == NULL || PyDict_SetItem(self->hosts, key, ba) < 0) {
                Py_XDECREF(ba);
                Py_DECREF(key);
                return -1;
            }
            Py_DECREF(ba); /* (the dict holds it) */
        }
        Py_DECREF(key);
        Py_INCREF(ba);
        Py_XSETREF(self->last_host, ba);
        self->last_host_key.n = 0;
        if (buf_put(&self->last_host_key, self->key.p, self->key.n) < 0)
            return -1;
    }
    Py_ssize_t n = PyByteArray_GET_SIZE(self->last_host);
    if (PyByteArray_Resize(self->last_host, n + 2 * (Py_ssize_t)sizeof(double)) < 0)
        return -1;
    double pair[2] = {t0, t0 + d};
    memcpy(PyByteArray_AS_STRING(self->last_host) + n, pair, sizeof pair);
    return 0;
}

/* a collective's caller (the info result `res`): the cpu_colls tuple on_event's _cpu_coll makes,
 * (ts, end, pid, collective, implementation, msg_bytes, tid); 0 done, -2 not handled, -1 error */
static int cpu_coll(Scanner *self, const Ev *ev, double t0, double d, PyObject *res) {
    PyObject *pid, *tid;
    int rc = ids_of(self, ev, 1, &pid, &tid);
    if (rc < 0)
        return rc;
    PyObject *t0o = PyFloat_FromDouble(t0), *t1o = PyFloat_FromDouble(t0 + d), *tup = NULL;
    if (t0o && t1o)
        tup = untracked(PyTuple_Pack(7, t0o, t1o, pid, PyTuple_GET_ITEM(res, 0), PyTuple_GET_ITEM(res, 1),
                                     PyTuple_GET_ITEM(res, 2), tid));
    rc = (tup != NULL && PyList_Append(self->cpu_colls, tup) == 0) ? 0 : -1;
    Py_DECREF(pid);
    Py_DECREF(tid);
    Py_XDECREF(t0o);
    Py_XDECREF(t1o);
    Py_XDECREF(tup);
    return rc;
}

/* 0: handled (counted), 1: delivered as a dict (items), -2: SLOW, -1: error */
static int handle(Scanner *self, const Ev *ev, Py_ssize_t *n_kernels, PyObject *items) {
    const Val *ph = TOP(ev, K_PH);
    if (ph->t != T_STR || ph->n != self->only_n || memcmp(ph->p, self->only, (size_t)self->only_n) != 0) {
        if (ph->t == T_STR && ph->esc)
            return -2; /* (an escape may spell only_ph) */
        return 0; /* on_event reads nothing of another ph */
    }
    if (ph->esc)
        return -2;
    if (!is_scalar(TOP(ev, K_PID)) || !is_scalar(TOP(ev, K_TID)))
        return -2; /* on_event refuses a list/object id on any such event */
    int with_kernels = *n_kernels > 0;
    if (self->decided_with_kernels != with_kernels) { /* the collector's rules change at its first kernel */
        table_clear(&self->decisions);
        self->decided_with_kernels = with_kernels;
    }
    int code = decision(self, ev);
    if (code < 0)
        return code;
    if (code == D_SKIP)
        return 0;
    const Val *cat = TOP(ev, K_CAT), *args = TOP(ev, K_ARGS);
    if (args->t != T_NONE && args->t != T_NULL && args->t != T_OBJ)
        return -2;
    int has_args = args->t == T_OBJ;
    if (code >= D_ARG && !(has_args && ARG(ev, code - D_ARG)->t != T_NONE))
        return 0; /* decoded only if args has that key */
    int cpu_op = str_is(cat, "cpu_op");
    if (code == D_HOST && has_args && ARG(ev, self->a_coll)->t != T_NONE)
        code = cpu_op ? D_KEEP : D_COLL; /* its args may make it a collective */
    double t0, d;
    if (code == D_COLL || (code == D_KEEP && cpu_op && !with_kernels)) {
        /* a CPU trace's collective candidate, recorded as on_event does: a cpu_op is a host op and,
         * if the classifier says so, a collective; an annotation is one or the other */
        const Val *name = TOP(ev, K_NAME);
        if (name->t != T_NONE && (name->t != T_STR || name->esc))
            return -2;
        if (times(ev, &t0, &d) < 0)
            return -2;
        PyObject *res = info_of(self, 1, ev, name); /* (borrowed) */
        if (res == NULL)
            return PyErr_Occurred() ? -1 : -2;
        if (cpu_op || res == Py_None) {
            int rc = host_op(self, ev, t0, d);
            if (rc < 0 || res == Py_None)
                return rc;
        }
        return cpu_coll(self, ev, t0, d, res);
    }
    int busy = str_is(cat, "kernel") || str_is(cat, "gpu_memcpy") || str_is(cat, "gpu_memset");
    int kernel = str_is(cat, "kernel");
    int runtime = str_is(cat, "cuda_runtime") || str_is(cat, "cuda_driver");
    if (code == D_HOST) {
        if (times(ev, &t0, &d) < 0)
            return -2;
        return host_op(self, ev, t0, d);
    }
    int fast_kernel = busy && code == D_KEEP && !(kernel && *n_kernels == 0);
    int fast_launch = runtime && code == D_ARG + self->a_corr;
    int fast_cpu = cpu_op && with_kernels && (code == D_KEEP || code == D_ARG + self->a_coll);
    if (busy && kernel && *n_kernels == 0)
        return -2; /* the first kernel: the collector's rules change (on_event does it) */
    if (!(fast_kernel || fast_launch || fast_cpu)) {
        PyObject *e = event_dict(self, ev);
        if (e == NULL)
            return PyErr_Occurred() ? -1 : -2;
        return append_new(items, e) < 0 ? -1 : 1;
    }
    if (times(ev, &t0, &d) < 0)
        return -2;
    const Val *corr_v = has_args ? ARG(ev, self->a_corr) : NULL;
    if (corr_v != NULL && !is_scalar(corr_v))
        return -2;
    const Val *name = TOP(ev, K_NAME);
    if (name->t != T_NONE && (name->t != T_STR || name->esc))
        return -2; /* (a non-str name: on_event's str()) */
    PyObject *res = NULL; /* info */
    if (fast_cpu || (fast_kernel && kernel)) {
        const Ev *src = ev; /* (null or absent args: arg_mask is 0, none of its keys) */
        if (fast_cpu && name->t == T_NONE)
            return 0; /* (decide never keeps a cpu_op without a name) */
        res = info_of(self, fast_cpu, src, name);
        if (res == NULL)
            return PyErr_Occurred() ? -1 : -2;
    }
    PyObject *pid = pid_of(self, ev);
    if (pid == NULL)
        return PyErr_Occurred() ? -1 : -2;
    PyObject *t0o = NULL, *t1o = NULL, *corr = NULL, *tup = NULL;
    int rc = -1;
    if (fast_cpu) {
        rc = res == Py_None ? 0 : cpu_coll(self, ev, t0, d, res);
        goto done;
    }
    corr = corr_v != NULL ? build_or_none(corr_v) : (Py_INCREF(Py_None), Py_None);
    if (corr == NULL) {
        rc = PyErr_Occurred() ? -1 : -2;
        goto done;
    }
    t0o = PyFloat_FromDouble(t0);
    if (t0o == NULL)
        goto done;
    if (fast_launch) {
        tup = untracked(PyTuple_Pack(3, t0o, pid, corr));
        rc = (tup != NULL && PyList_Append(self->launches, tup) == 0) ? 0 : -1;
        goto done;
    }
    t1o = PyFloat_FromDouble(t0 + d);
    if (t1o == NULL)
        goto done;
    if (res != NULL && res != Py_None) { /* a collective kernel: its sequence number */
        PyObject *seq = Py_None;
        Py_INCREF(seq);
        if (ARG(ev, self->a_seq)->t != T_NONE) {
            const Val *pg_v = ARG(ev, self->a_pg), *seq_v = ARG(ev, self->a_seq);
            if (!is_scalar(pg_v) || !is_scalar(seq_v)) {
                Py_DECREF(seq);
                rc = -2;
                goto done;
            }
            PyObject *pg = build_or_none(pg_v), *sq = build_or_none(seq_v);
            if (pg == NULL || sq == NULL) {
                Py_XDECREF(pg);
                Py_XDECREF(sq);
                Py_DECREF(seq);
                rc = PyErr_Occurred() ? -1 : -2;
                goto done;
            }
            Py_DECREF(seq);
            seq = untracked(PyTuple_Pack(2, pg, sq));
            Py_DECREF(pg);
            Py_DECREF(sq);
            if (seq == NULL)
                goto done;
        }
        tup = untracked(PyTuple_Pack(8, t0o, t1o, pid, corr, PyTuple_GET_ITEM(res, 0), PyTuple_GET_ITEM(res, 1),
                                     PyTuple_GET_ITEM(res, 2), seq));
        Py_DECREF(seq);
    } else {
        tup = untracked(PyTuple_Pack(8, t0o, t1o, pid, corr, Py_None, self->empty, self->zero, Py_None));
    }
    if (tup != NULL && PyList_Append(self->kernels, tup) == 0) {
        rc = 0;
        if (kernel)
            (*n_kernels)++;
    }
done:
    Py_DECREF(pid);
    Py_XDECREF(t0o);
    Py_XDECREF(t1o);
    Py_XDECREF(corr);
    Py_XDECREF(tup);
    return rc;
}

/* scan(buf, pos, n_kernels) -> (status, pos, items, counted, n_kernels)
 *   MORE: pos is the start of an event not complete in buf (read more; at end of file: SLOW);
 *   END: past the array's ']';  SLOW: pos is the start of an element the reference must read;
 *   WIDE: buf (a str) holds characters beyond U+00FF (nothing done).
 * items: dicts for on_event, in order; counted: events handled here (not in items). */
static PyObject *Scanner_scan(Scanner *self, PyObject *args) {
    PyObject *buf;
    Py_ssize_t pos, n_kernels;
    if (!PyArg_ParseTuple(args, "Onn", &buf, &pos, &n_kernels))
        return NULL;
    /* a str of 1-byte kind, or bytes (UTF-8: a byte beyond 0x7f stops the scan at its event, like a
     * character beyond U+007F does in a str); either ends with a NUL, which SKIP_WS may read */
    int is_bytes = PyBytes_Check(buf);
    if (!is_bytes && !PyUnicode_Check(buf)) {
        PyErr_SetString(PyExc_TypeError, "scan needs a str or bytes buffer");
        return NULL;
    }
    PyObject *items = PyList_New(0);
    if (items == NULL)
        return NULL;
    Py_CLEAR(self->last_host); /* (the caller empties `hosts` between calls) */
    Py_ssize_t counted = 0, nk0 = n_kernels;
    int status;
    if (!is_bytes && PyUnicode_KIND(buf) != PyUnicode_1BYTE_KIND) {
        status = ST_WIDE;
        goto out;
    }
    const unsigned char *s = is_bytes ? (const unsigned char *)PyBytes_AS_STRING(buf) : PyUnicode_1BYTE_DATA(buf);
    Py_ssize_t n = is_bytes ? PyBytes_GET_SIZE(buf) : PyUnicode_GET_LENGTH(buf);
    if (pos < 0 || pos > n) {
        Py_DECREF(items);
        PyErr_SetString(PyExc_IndexError, "pos out of range");
        return NULL;
    }
    Ev ev;
    for (;;) {
        SKIP_WS(s, pos, n);
        if (pos >= n) {
            status = ST_MORE;
            break;
        }
        if (s[pos] != '{') {
            status = ST_SLOW; /* ']' after a ',', a non-object element, invalid JSON */
            break;
        }
        Py_ssize_t j = pos;
        int r = parse_event(s, &j, n, &self->keys, &ev);
        if (r != J_OK) {
            status = r == J_MORE ? ST_MORE : ST_SLOW;
            break;
        }
        SKIP_WS(s, j, n);
        if (j >= n) {
            status = ST_MORE; /* its separator is not in the buffer yet */
            break;
        }
        if (s[j] != ',' && s[j] != ']') {
            status = ST_SLOW;
            break;
        }
        int h = handle(self, &ev, &n_kernels, items);
        if (h == -1) {
            Py_DECREF(items);
            return NULL;
        }
        if (h == -2) {
            status = ST_SLOW;
            break;
        }
        if (h == 0)
            counted++;
        if (s[j] == ']') {
            pos = j + 1;
            status = ST_END;
            break;
        }
        pos = j + 1;
    }
out:
    return Py_BuildValue("(inNnn)", status, pos, items, counted, n_kernels - nk0);
}

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)Scanner_scan, METH_VARARGS,
     "scan(buf, pos, n_kernels) -> (status, pos, items, counted, new_kernels)"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "specmodel.trace._cscan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The compiled pre-filter of one trace (see the module source).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
};

/* ---------------------------------------------------------------------------------------- */
/* sort_pairs: a thread's host ops, as the collector records them */

static int cmp_pair(const void *a, const void *b) {
    const double *x = a, *y = b;
    if (x[0] != y[0])
        return (x[0] > y[0]) - (x[0] < y[0]);
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* sort_pairs(array('d') of start, end, start, end, ...): in place, by (start, end), as sorted() of
 * the (start, end) tuples orders them (the values are finite: the collector checked) */
static PyObject *sort_pairs(PyObject *mod, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (view.format == NULL || strcmp(view.format, "d") != 0 || view.len % (Py_ssize_t)(2 * sizeof(double))) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "sort_pairs needs an array('d') of pairs");
        return NULL;
    }
    double *v = view.buf;
    size_t n = (size_t)view.len / (2 * sizeof(double));
    size_t i = 1;
    while (i < n && cmp_pair(v + 2 * (i - 1), v + 2 * i) <= 0) /* (mostly recorded in order already) */
        i++;
    if (i < n)
        qsort(v, n, 2 * sizeof(double), cmp_pair);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"sort_pairs", sort_pairs, METH_O, "sort_pairs(array('d')): sort (start, end) pairs in place"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_cscan",
                                    "The compiled pre-filter of specmodel ingest.", -1, module_methods};

PyMODINIT_FUNC PyInit__cscan(void) {
    for (int c = 0; c < 256; c++)
        STR_STOP[c] = (unsigned char)(c == '"' || c == '\\' || c < 0x20 || c >= 0x80);
    IS_WS[' '] = IS_WS['\t'] = IS_WS['\n'] = IS_WS['\r'] = 1;
    if (PyType_Ready(&ScannerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "MORE", ST_MORE) < 0 || PyModule_AddIntConstant(m, "END", ST_END) < 0 ||
        PyModule_AddIntConstant(m, "SLOW", ST_SLOW) < 0 || PyModule_AddIntConstant(m, "WIDE", ST_WIDE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
