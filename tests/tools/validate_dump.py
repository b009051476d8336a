#!/usr/bin/env python3
"""Validate nccl-watchdog dump files against docs/dump-schema.json.

Usage: validate_dump.py [--schema PATH] DUMP.json[.gz] [DUMP.json[.gz] ...]

Exit status 0 when every file is valid, 1 otherwise (including a missing jsonschema module, an
unreadable file or a file that is not JSON). Each problem is printed on stderr as
"<file>: <json path>: <message>".
"""
import argparse
import gzip
import json
import os
import sys

MAX_ERRORS = 20


def default_schema():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "docs", "dump-schema.json"))


def json_path(error):
    path = "$"
    for part in error.absolute_path:
        path += "[%d]" % part if isinstance(part, int) else "." + str(part)
    return path


def main(argv):
    ap = argparse.ArgumentParser(description="Validate nccl-watchdog dumps against the JSON Schema.")
    ap.add_argument("--schema", default=default_schema(), help="schema file (default: %(default)s)")
    ap.add_argument("dumps", nargs="+", help="dump files")
    args = ap.parse_args(argv)

    try:
        import jsonschema
    except ImportError:
        print("validate_dump: the python3 'jsonschema' module is missing "
              "(Debian: apt-get install python3-jsonschema)", file=sys.stderr)
        return 1

    try:
        with open(args.schema, encoding="utf-8") as f:
            schema = json.load(f)
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        validator = cls(schema)
    except (OSError, ValueError, jsonschema.exceptions.SchemaError) as e:
        print("validate_dump: cannot use schema %s: %s" % (args.schema, e), file=sys.stderr)
        return 1

    bad = 0
    for path in args.dumps:
        try:
            opener = gzip.open if path.endswith(".gz") else open  # peer summaries: *.json.gz
            with opener(path, "rt", encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print("%s: not a readable JSON document: %s" % (path, e), file=sys.stderr)
            bad += 1
            continue
        errors = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
        if errors:
            bad += 1
            for e in errors[:MAX_ERRORS]:
                print("%s: %s: %s" % (path, json_path(e), e.message), file=sys.stderr)
            if len(errors) > MAX_ERRORS:
                print("%s: ... %d more errors" % (path, len(errors) - MAX_ERRORS), file=sys.stderr)
        else:
            print("%s: valid (%s, reason %s, %d comms)" %
                  (path, doc.get("format"), doc.get("reason"), len(doc.get("comms", []))))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
