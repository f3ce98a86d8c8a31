"""On-disk formats (schema-versioned, validated on load)."""

from specmodel.schema.profile import (
    KINDS,
    PROFILE_SCHEMA,
    PROFILE_SCHEMA_VERSION,
    AllReduceFit,
    AllReducePoint,
    CostRow,
    Profile,
    Source,
    SpecConfig,
    load_profile,
    profile_from_dict,
    profile_to_dict,
    resolve_profile_path,
    save_profile,
)

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
