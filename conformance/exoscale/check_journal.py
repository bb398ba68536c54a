#!/usr/bin/env python3
"""Checks exchanges with the fake Exoscale API against Exoscale's own OpenAPI document.

Usage: check_journal.py [--json] JOURNAL.jsonl [JOURNAL.jsonl ...]

A journal is what `joinery simulate --exoscale-journal` or `joinery sim serve --cloud exoscale
--exoscale-journal` writes: one exchange per line (method, path, query, requestBody, status,
contentType, responseBody). For every exchange this script

  * finds the operation in the `exoscale` package's openapi.json (an unknown path or method is
    a violation),
  * validates the request (path and query parameters, body) with openapi-core,
  * reports every deprecated operation, parameter or body field the request uses,
  * validates the response with openapi-core when the document describes its status (the
    document describes few error statuses; the others are counted, not judged).

Object schemas are made strict first (`additionalProperties: false` wherever the document
lists properties and says nothing else), so a field the document does not know is reported
too. Each violation names the operation id. Exit status: 0 when nothing was found, 1 otherwise.
"""

import argparse
import collections
import copy
import json
import re
import sys
from importlib import resources

from openapi_core import Config, OpenAPI
from openapi_core.testing import MockRequest, MockResponse

# The fake serves zone z under /z/v2; the document's server is https://api-{zone}.exoscale.com/v2.
ZONE_PREFIX = re.compile(r"^/(?P<zone>[a-z0-9-]+)/v2(?P<rest>/.*)$")


def load_document():
    """Exoscale's API definition, as shipped in the official package."""
    with resources.files("exoscale").joinpath("openapi.json").open() as f:
        return json.load(f)


def strict(node):
    """Adds additionalProperties: false to every object schema that lists properties only."""
    if isinstance(node, dict):
        if isinstance(node.get("properties"), dict) and "additionalProperties" not in node:
            node["additionalProperties"] = False
        for value in node.values():
            strict(value)
    elif isinstance(node, list):
        for value in node:
            strict(value)
    return node


class Operations:
    """The document's operations, found by method and concrete path."""

    def __init__(self, document):
        self.document = document
        self.routes = []
        for template, item in document["paths"].items():
            pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
            for method, operation in item.items():
                if isinstance(operation, dict) and "operationId" in operation:
                    # Literal paths before templated ones, and among paths with as many
                    # parameters the one with more literal text first, so
                    # /instance/{id}:reboot never hides behind /instance/{id} (whose
                    # parameter pattern matches "ID:reboot" too).
                    literal = len(re.sub(r"\{[^}]+\}", "", template))
                    self.routes.append(((template.count("{"), -literal), re.compile(pattern), method, template, operation))
        self.routes.sort(key=lambda r: r[0])

    def find(self, method, path):
        for _, pattern, m, template, operation in self.routes:
            if m == method.lower() and pattern.match(path):
                return template, operation
        return None, None

    def resolve(self, schema):
        seen = 0
        while isinstance(schema, dict) and "$ref" in schema and seen < 20:
            target = self.document
            for part in schema["$ref"].lstrip("#/").split("/"):
                target = target[part]
            # Siblings of $ref (description, deprecated) stay with the referring schema.
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
            seen += 1
        return schema


def deprecated_fields(ops, schema, value, where):
    """The deprecated properties `value` sets, as dotted paths."""
    found = []
    schema = ops.resolve(schema)
    if not isinstance(schema, dict):
        return found
    if isinstance(value, dict):
        for name, item in value.items():
            prop = ops.resolve(schema.get("properties", {}).get(name))
            if isinstance(prop, dict):
                if prop.get("deprecated"):
                    found.append(f"{where}{name}")
                found.extend(deprecated_fields(ops, prop, item, f"{where}{name}."))
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            found.extend(deprecated_fields(ops, schema["items"], item, f"{where}[{i}]."))
    return found


def query_args(query):
    from urllib.parse import parse_qsl

    return [(k, v) for k, v in parse_qsl(query, keep_blank_values=True)]


def describe(error):
    """An openapi-core error: its kind and, for schema errors, each failing field and rule
    (not the whole value, which can be long)."""
    text = type(error).__name__
    cause = error
    while cause is not None:
        details = getattr(cause, "schema_errors", None)
        if details:
            return text + ": " + "; ".join(
                f"{'/'.join(str(p) for p in e.absolute_path) or '(body)'}: {e.message}" for e in details
            )
        cause = cause.__cause__
    return f"{text}: {error}"


def check(journals):
    document = load_document()
    ops = Operations(document)
    # The document itself does not pass openapi-spec-validator (its tags carry a `parent`
    # field), so the document check is off; requests and responses are still validated.
    strict_document = strict(copy.deepcopy(document))
    apis = {}

    def api_for(template):
        """A validator that knows only the operation's own path: openapi-core's path finder
        would take /instance/{id} for /instance/ID:reboot (its parameter matches "ID:reboot")."""
        if template not in apis:
            only = dict(strict_document, paths={template: strict_document["paths"][template]})
            apis[template] = OpenAPI.from_dict(only, config=Config(spec_validator_cls=None))
        return apis[template]

    violations = []
    counts = collections.Counter()
    undocumented_status = collections.Counter()
    for journal in journals:
        with open(journal) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                exchange = json.loads(line)
                origin = f"{journal}:{number}"
                method, path = exchange["method"], exchange["path"]
                matched = ZONE_PREFIX.match(path)
                if not matched:
                    violations.append((origin, "-", f"{method} {path}: not under /<zone>/v2"))
                    continue
                rest = matched["rest"]
                template, operation = ops.find(method, rest)
                if operation is None:
                    violations.append((origin, "-", f"{method} /v2{rest}: no such operation in the document"))
                    continue
                op_id = operation["operationId"]
                counts[op_id] += 1
                if operation.get("deprecated"):
                    violations.append((origin, op_id, "the operation is deprecated"))
                args = query_args(exchange.get("query") or "")
                for param in operation.get("parameters", []):
                    param = ops.resolve(param)
                    if param.get("in") == "query" and param.get("deprecated") and any(k == param["name"] for k, _ in args):
                        violations.append((origin, op_id, f"query parameter {param['name']} is deprecated"))
                known = {ops.resolve(p).get("name") for p in operation.get("parameters", []) if ops.resolve(p).get("in") == "query"}
                for name, _ in args:
                    if name not in known:
                        violations.append((origin, op_id, f"query parameter {name} is not in the document"))
                body = exchange.get("requestBody")
                data = json.dumps(body).encode() if body is not None else None
                host = f"https://api-{matched['zone']}.exoscale.com"
                request = MockRequest(host, method, "/v2" + rest, args=_multidict(args), data=data)
                api = api_for(template)
                try:
                    api.validate_request(request)
                except Exception as error:  # openapi-core raises one class per kind of problem
                    violations.append((origin, op_id, f"request: {describe(error)}"))
                if body is not None:
                    schema = (
                        operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
                    )
                    for field in deprecated_fields(ops, schema, body, "") if schema else []:
                        violations.append((origin, op_id, f"request field {field} is deprecated"))
                status = str(exchange["status"])
                if status not in operation.get("responses", {}):
                    undocumented_status[(op_id, status)] += 1
                    continue
                answer = json.dumps(exchange.get("responseBody")).encode()
                content_type = (exchange.get("contentType") or "application/json").split(";")[0]
                response = MockResponse(answer, status_code=int(status), content_type=content_type)
                try:
                    api.validate_response(request, response)
                except Exception as error:
                    violations.append((origin, op_id, f"response {status}: {describe(error)}"))
    return counts, undocumented_status, violations


def _multidict(pairs):
    from werkzeug.datastructures import ImmutableMultiDict

    return ImmutableMultiDict(pairs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("journals", nargs="+")
    args = parser.parse_args()
    counts, undocumented, violations = check(args.journals)
    if args.json:
        print(json.dumps({
            "operations": dict(sorted(counts.items())),
            "undocumentedStatuses": {f"{op} {status}": n for (op, status), n in sorted(undocumented.items())},
            "violations": [{"at": at, "operationId": op, "problem": problem} for at, op, problem in violations],
        }, indent=2))
    else:
        print(f"{sum(counts.values())} exchanges, {len(counts)} operations:")
        for op, n in sorted(counts.items()):
            print(f"  {op}: {n}")
        if undocumented:
            print("statuses the document does not describe (not judged):")
            for (op, status), n in sorted(undocumented.items()):
                print(f"  {op} {status}: {n}")
        for at, op, problem in violations:
            print(f"VIOLATION {op} ({at}): {problem}")
        print(f"{len(violations)} violation(s)")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
