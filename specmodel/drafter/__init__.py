"""Pre-flight checks of an EAGLE-3 drafter checkpoint against a target model (``check-drafter``)."""

from specmodel.drafter.checks import DrafterReport, Finding, accept_ceiling_tokens, check_drafter

__all__ = ["DrafterReport", "Finding", "accept_ceiling_tokens", "check_drafter"]
