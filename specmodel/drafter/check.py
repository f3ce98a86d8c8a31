"""``check_drafter``: can this EAGLE-3 drafter work with this target at all? (seconds, no GPU)

Reads the two ``config.json`` files, the drafter's safetensors headers and only its ``d2t`` /
``t2d`` tensors; from the target only ``config.json`` (it may be hundreds of GB of shards).
The published case it catches: the Kimi-K2 EAGLE-3 drafter on Kimi-K2.5 had the same shapes as
the K2.5 drafter, but its d2t differed in 31,748 of 32,000 slots, and it accepted 0.58 drafts
per step (52 tok/s against an 82 tok/s baseline).
"""

from __future__ import annotations

from pathlib import Path

from specmodel.drafter import checks as C
from specmodel.drafter.checks import accept_ceiling_tokens
from specmodel.drafter.findings import DrafterReport, Finding
from specmodel.drafter.hfconfig import load_config
from specmodel.drafter.safetensors_io import read_checkpoint_headers
from specmodel.drafter.token_freq import read_token_freq

__all__ = ["DrafterReport", "Finding", "accept_ceiling_tokens", "check_drafter"]


def check_drafter(*, drafter_dir: str | Path, target_dir: str | Path,
                  reference_dir: str | Path | None = None, token_freq: str | Path | None = None) -> DrafterReport:
    """Run every check; bad input (missing files, unreadable headers, a d2t/t2d of the wrong
    dtype or shape, a bad token-frequency file) raises :class:`~specmodel.errors.SpecmodelError`."""
    dcfg = load_config(drafter_dir, "drafter")
    tcfg = load_config(target_dir, "target")
    dims = C.read_dims(dcfg, tcfg)
    tensors = read_checkpoint_headers(drafter_dir)
    vm = C.load_vocab_map(tensors, dims, "drafter")

    findings: list[Finding] = [
        C.check_architecture(dcfg),
        C.check_hidden_size(dcfg, dims),
        C.check_vocab_size(dims),
        C.check_draft_vocab_size(dims),
        C.check_heads(dcfg, tcfg, dims),
        C.check_dtype(dcfg, tcfg),
        C.check_aux_layer_ids(dcfg, dims),
        C.check_context_length(dcfg, tcfg),
        C.check_layout(tensors, dims),
        C.check_embed_tokens(tensors, dims),
        C.check_fc(dcfg, tensors, dims),
        C.check_lm_head(dcfg, tensors, dims),
    ]
    attn = C.check_attention(tensors, dcfg, dims)
    if attn is not None:
        findings.append(attn)
    findings += [C.check_weight_dtypes(dcfg, tensors), C.check_d2t(vm, dims), C.check_t2d(vm, dims)]

    if reference_dir is not None:
        rcfg = load_config(reference_dir, "reference-drafter")
        # the reference is read against its own config; its target is assumed to be ours
        rdims = C.read_dims(rcfg, tcfg)
        rtensors = read_checkpoint_headers(reference_dir)
        rvm = C.load_vocab_map(rtensors, rdims, "reference drafter")
        findings.append(C.check_reference_shapes(tensors, rtensors, dcfg, rcfg))
        findings += C.check_reference_d2t(vm, rvm, dims, rdims)

    ceiling = None
    if token_freq is not None:
        ids, counts = read_token_freq(token_freq, dims.target_vocab)
        cov_finding, ceiling = C.check_coverage(vm, dims, ids, counts, str(token_freq))
        findings.append(cov_finding)

    return DrafterReport(drafter_dir=str(drafter_dir), target_dir=str(target_dir),
                         reference_dir=None if reference_dir is None else str(reference_dir),
                         findings=tuple(findings), acceptance_ceiling=ceiling)
