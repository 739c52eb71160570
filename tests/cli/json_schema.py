#!/usr/bin/env python3
"""json_schema.py - checks gpusnap's --json documents against docs/json (JSON Schema 2020-12).

  json_schema.py DIR schemas CMD...    every DIR/*.json is a valid schema for "gpusnap/<name>/<n>",
                                        and the schemas are exactly those of the commands CMD... (the
                                        ones whose --help offers --json)
  json_schema.py DIR doc CMD FILE      FILE holds one document of CMD valid against DIR/CMD.json

Exit 0 when it holds, 1 (with each violation on stdout) when not, 77 without python3-jsonschema.
"""
import json
import os
import sys

try:
    import jsonschema
    from jsonschema import Draft202012Validator
except ImportError:
    print("SKIP: python3-jsonschema is not installed (scripts/install-deps.sh installs it)")
    sys.exit(77)


def load(path):
    with open(path) as f:
        return json.load(f)


def check_schemas(folder, commands):
    bad = []
    names = sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".json"))
    for name in names:
        schema = load(os.path.join(folder, name + ".json"))
        try:
            Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as e:
            bad.append(f"{name}.json is no valid JSON Schema: {e.message}")
            continue
        if schema.get("$schema") != "https://json-schema.org/draft/2020-12/schema":
            bad.append(f"{name}.json does not declare draft 2020-12")
        tag = schema.get("properties", {}).get("schema", {}).get("const", "")
        if tag.rsplit("/", 1)[0] != f"gpusnap/{name}" or not tag.rsplit("/", 1)[-1].isdigit():
            bad.append(f"{name}.json: properties.schema.const is '{tag}', not gpusnap/{name}/<version>")
    for cmd in commands:
        if cmd not in names:
            bad.append(f"gpusnap {cmd} offers --json but docs/json/{cmd}.json does not exist")
    for name in names:
        if name not in commands:
            bad.append(f"docs/json/{name}.json is for no command that offers --json")
    return bad


def check_doc(folder, cmd, path):
    with open(path) as f:
        text = f.read()
    lines = text.splitlines()
    if len(lines) != 1:
        return [f"stdout holds {len(lines)} lines, not one JSON document: {text[:300]!r}"]
    try:
        doc = json.loads(lines[0])
    except ValueError as e:
        return [f"not JSON ({e}): {lines[0][:300]!r}"]
    validator = Draft202012Validator(load(os.path.join(folder, cmd + ".json")))
    bad = []
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.path)):
        where = "/".join(str(p) for p in e.path) or "(top)"
        bad.append(f"{where}: {e.message[:300]}")
        # anyOf/oneOf say only that no branch fits: the branches' own complaints say why
        for sub in sorted(e.context or [], key=lambda s: list(s.path))[:8]:
            bad.append(f"    {'/'.join(str(p) for p in sub.absolute_path) or '(top)'}: {sub.message[:200]}")
    return bad


def main(argv):
    if len(argv) >= 3 and argv[2] == "schemas":
        bad = check_schemas(argv[1], argv[3:])
    elif len(argv) == 5 and argv[2] == "doc":
        bad = check_doc(argv[1], argv[3], argv[4])
    else:
        print(__doc__)
        return 2
    for line in bad:
        print("    " + line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
