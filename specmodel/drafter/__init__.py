"""Pre-flight checks of an EAGLE-3 drafter checkpoint against a target model (``check-drafter``)."""

from specmodel.drafter.checks import check_drafter
from specmodel.drafter.findings import DrafterReport, Finding
from specmodel.drafter.weight_checks import accept_ceiling_tokens

__all__ = ["DrafterReport", "Finding", "accept_ceiling_tokens", "check_drafter"]
