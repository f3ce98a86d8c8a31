"""Types of the compiled pre-filter (specmodel/trace/_cscan.c)."""

from collections.abc import Callable
from typing import Any

MORE: int
END: int
SLOW: int
WIDE: int

def sort_pairs(pairs: Any, /) -> None: ...

class Scanner:
    def __init__(self, *, decide: Callable[[Any, Any, Any], Any],
                 info: Callable[[bool, str, dict[str, Any]], tuple[str, str, int] | None], missing: Any,
                 host_op: Any, coll_or_host: Any, args_keys: tuple[str, ...], only_ph: str, kernels: list[Any], launches: list[Any],
                 cpu_colls: list[Any], hosts: dict[tuple[Any, Any], bytearray], int_max_digits: int = ...) -> None: ...
    def scan(self, buf: str | bytes, pos: int, n_kernels: int, /) -> tuple[int, int, list[dict[str, Any]], int, int]: ...
