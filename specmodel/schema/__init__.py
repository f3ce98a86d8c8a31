"""On-disk formats (schema-versioned, validated on load)."""

from specmodel.schema.costrows import KINDS, AllReduceFit, AllReducePoint, CostRow, SpecConfig
from specmodel.schema.profile import (
    PROFILE_SCHEMA,
    PROFILE_SCHEMA_VERSION,
    Profile,
    load_profile,
    profile_from_dict,
    profile_to_dict,
    resolve_profile_path,
    save_profile,
)
from specmodel.schema.source import Source

__all__ = [
    "KINDS",
    "PROFILE_SCHEMA",
    "PROFILE_SCHEMA_VERSION",
    "AllReduceFit",
    "AllReducePoint",
    "CostRow",
    "Profile",
    "Source",
    "SpecConfig",
    "load_profile",
    "profile_from_dict",
    "profile_to_dict",
    "resolve_profile_path",
    "save_profile",
]
