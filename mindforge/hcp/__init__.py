"""Harness Context Protocol: one document describes a whole MoL harness.

Public API (import from here)::

    load_hcp(path) -> HCP                  read + validate + model, DocumentErrors on failure
    parse_hcp(doc, source) -> HCP          the same for a parsed document
    validate_document(doc, source) -> list[InputError]
    canonical_json(doc) -> str; pretty_json(doc) -> str; hcp_hash(doc) -> "h-<16 hex>"
    apply_patch(doc, ops, source) -> dict  RFC 6902, /guarded refused, result re-validated
    diff_documents(a, b) -> HCPDiff         changed pointers + unified diff of pretty text
"""

from mindforge.hcp.canonical import canonical_json, hcp_hash, pretty_json
from mindforge.hcp.models import (
    FORMAT,
    HCP,
    PLACEHOLDERS,
    ROLES,
    ROUTES,
    Hook,
    Limits,
    Provider,
    Router,
    RouteSpec,
    Sampling,
    Skill,
    Tool,
    TunableRange,
)
from mindforge.hcp.validate import (
    DocumentErrors,
    load_hcp,
    parse_hcp,
    read_json,
    schema_dir,
    validate_document,
)

__all__ = [
    "FORMAT",
    "HCP",
    "PLACEHOLDERS",
    "ROLES",
    "ROUTES",
    "DocumentErrors",
    "Hook",
    "Limits",
    "Provider",
    "RouteSpec",
    "Router",
    "Sampling",
    "Skill",
    "Tool",
    "TunableRange",
    "canonical_json",
    "hcp_hash",
    "load_hcp",
    "parse_hcp",
    "pretty_json",
    "read_json",
    "schema_dir",
    "validate_document",
]
