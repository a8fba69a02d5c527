"""Harness Context Protocol: one document describes a whole MoL harness.

Public API (import from here)::

    load_hcp(path) -> HCP                  read + validate + model, DocumentErrors on failure
    parse_hcp(doc, source) -> HCP          the same for a parsed document
    validate_document(doc, source) -> list[InputError]
    canonical_json(doc) -> str; pretty_json(doc) -> str; hcp_hash(doc) -> "h-<16 hex>"
    without_editor_keys(doc) -> dict       the document less `$schema` (no part of its meaning)
    apply_patch(doc, ops, source) -> dict  RFC 6902, /guarded refused, result re-validated
    diff_documents(a, b, a_name, b_name) -> HCPDiff   changed pointers + unified diff
    served_adapter_patch(route, name) -> list[op]     the edit Update makes
    serving_patch(hcp) -> list[op]                    serve another HCP's adapter versions (ablations)
    import_mol_profile(dir, model_name=, base_model=, template=, default_route=) -> dict
"""

from mindforge.hcp.canonical import canonical_json, hcp_hash, pretty_json, without_editor_keys
from mindforge.hcp.diff import HCPDiff, changed_pointers, diff_documents
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
from mindforge.hcp.mol import import_mol_profile
from mindforge.hcp.patch import GuardedEdit, apply_patch, guarded_violations, served_adapter_patch, serving_patch
from mindforge.hcp.semantics import semantic_problems, under_guarded
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
    "GuardedEdit",
    "HCPDiff",
    "Hook",
    "Limits",
    "Provider",
    "RouteSpec",
    "Router",
    "Sampling",
    "Skill",
    "Tool",
    "TunableRange",
    "apply_patch",
    "canonical_json",
    "changed_pointers",
    "diff_documents",
    "guarded_violations",
    "hcp_hash",
    "import_mol_profile",
    "load_hcp",
    "parse_hcp",
    "pretty_json",
    "read_json",
    "schema_dir",
    "semantic_problems",
    "served_adapter_patch",
    "serving_patch",
    "under_guarded",
    "validate_document",
    "without_editor_keys",
]
