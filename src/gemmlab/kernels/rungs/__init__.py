"""One module per rung, each defining `SPEC`; the registry discovers them (no hand-kept list)."""
