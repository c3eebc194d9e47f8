"""Shared by the distrun-bench tests: where the programs and the schema are, schema
validation (python3-jsonschema), and the launcher tests' check/skip/main."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "launcher"))
from launcher_harness import (BIN_DIR, DISTRUN, PYTHON, SKIP, Failed, check, free_port, main, run,  # noqa: E402,F401
                              skip)

BENCH = os.path.join(BIN_DIR, "distrun-bench")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = os.path.join(ROOT, "lib", "distrun", "bench", "bench.schema.json")


def validate(doc, what):
    """Fails unless `doc` (a -J document) validates against the schema in the repository."""
    try:
        import jsonschema
    except ImportError:
        skip("python3-jsonschema is not installed (scripts/deps.sh test)")
    check(doc is not None, f"{what}: no JSON written")
    schema = json.load(open(SCHEMA))
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=str)
    check(not errors, f"{what}: schema errors: " + "; ".join(e.message for e in errors[:5]))


def refused(doc, what):
    """Fails unless `doc` does NOT validate against the schema (the validation can fail)."""
    try:
        validate(doc, what)
    except Failed:
        return
    check(False, f"{what}: validates, and must not")
