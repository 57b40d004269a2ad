"""Validate Kubernetes manifests offline against the JSON Schemas beside this
file (Kubernetes v1.33.0, strict: unknown fields are errors; see README.md).

    python3 tests/schemas/kubernetes/validate.py FILE.yaml...

Prints one JSON object on stdout: {"documents": [{"file", "index", "object"}],
"errors": [...]} (the parsed documents, for structural checks), and each
error on stderr; exits 1 when any document is invalid or of a kind that has
no schema here. Needs PyYAML and jsonschema (Debian: python3-yaml,
python3-jsonschema); works with jsonschema 4.10 (Debian 12's, RefResolver)
and 4.18+ (referencing). Nothing is fetched: a $ref outside the checked-in
files is an error.
"""

import json
import os
import sys

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA_FILES = {
    ("batch/v1", "Job"): "job-batch-v1.json",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaim-v1.json",
    ("v1", "Pod"): "pod-v1.json",
}


def load(name):
    with open(os.path.join(HERE, name)) as f:
        return json.load(f)


DEFINITIONS = load("_definitions.json")


def validator_for(schema):
    try:
        from referencing import Registry, Resource
    except ImportError:
        # jsonschema < 4.18: RefResolver, with the network turned off.
        def offline(uri):
            raise jsonschema.RefResolutionError(f"{uri} is not checked in")

        resolver = jsonschema.RefResolver.from_schema(
            schema,
            store={DEFINITIONS["$id"]: DEFINITIONS},
            handlers={"http": offline, "https": offline, "file": offline},
        )
        return jsonschema.Draft202012Validator(schema, resolver=resolver)
    # A registry with no `retrieve`: an unknown URI is unresolvable, never fetched.
    registry = Registry().with_resources(
        [
            (DEFINITIONS["$id"], Resource.from_contents(DEFINITIONS)),
            (schema["$id"], Resource.from_contents(schema)),
        ]
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


def main(paths):
    validators = {}
    documents, errors = [], []
    for path in paths:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        name = os.path.basename(path)
        if not docs:
            errors.append(f"{name}: no document")
        for index, doc in enumerate(docs):
            documents.append({"file": name, "index": index, "object": doc})
            if not isinstance(doc, dict):
                errors.append(f"{name}#{index}: not a mapping")
                continue
            key = (doc.get("apiVersion"), doc.get("kind"))
            where = f"{name}#{index} ({key[1]} {doc.get('metadata', {}).get('name')})"
            if key not in SCHEMA_FILES:
                errors.append(f"{where}: no schema here for apiVersion {key[0]} kind {key[1]}")
                continue
            if key not in validators:
                validators[key] = validator_for(load(SCHEMA_FILES[key]))
            for error in validators[key].iter_errors(doc):
                at = "/".join(map(str, error.absolute_path)) or "(top)"
                errors.append(f"{where}: {at}: {error.message}")
    for line in errors:
        print(line, file=sys.stderr)
    json.dump({"documents": documents, "errors": errors}, sys.stdout)
    print()
    return 1 if errors else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: validate.py FILE.yaml...")
    sys.exit(main(sys.argv[1:]))
