"""The JSON document has a JSON Schema, shipped in the package: every sample's document (and
every readable broken capture's) validates against it, also with additional properties
forbidden (so a new field cannot go undocumented), and docs/json.md names
exactly the fields the schema has."""

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest

import nagleprobe
from nagleprobe.json_report import SCHEMA_VERSION, json_schema

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
FORMATS = json.loads((SAMPLES / "formats" / "expected.json").read_text())
BROKEN = json.loads((ROOT / "tests" / "broken" / "expected.json").read_text())
CAPTURES = (sorted(SAMPLES.glob("*.pcap"))
            + [SAMPLES / "formats" / k for k, v in FORMATS.items()
               if isinstance(v, dict) and v.get("stalls") is not None]
            + [ROOT / "tests" / "broken" / k for k, v in BROKEN.items()
               if isinstance(v, dict) and v.get("exit") == 0])


def strict(schema: dict) -> dict:
    """The schema with additional properties forbidden wherever properties are listed."""
    out = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(out)
    return out


SCHEMA = json_schema()
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
STRICT = jsonschema.Draft202012Validator(strict(SCHEMA))


def test_the_shipped_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["properties"]["schema_version"]["const"] == SCHEMA_VERSION


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name)
def test_every_sample_s_document_validates(capture):
    doc = json.loads(nagleprobe.analyze(str(capture)).to_json())
    VALIDATOR.validate(doc)
    STRICT.validate(doc)
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["tool"] == {"name": "nagleprobe", "version": nagleprobe.__version__}


def test_the_schema_check_is_real(echo_split):
    doc = json.loads(echo_split.to_json())
    bad = copy.deepcopy(doc)
    del bad["flows"][0]["endpoints"]["client"]["nagle"]
    assert not VALIDATOR.is_valid(bad)
    bad = copy.deepcopy(doc)
    bad["stalls"][0]["sender"] = "proxy"
    assert not VALIDATOR.is_valid(bad)
    bad = copy.deepcopy(doc)
    bad["flows"][0]["new_field"] = 1
    assert VALIDATOR.is_valid(bad) and not STRICT.is_valid(bad)  # consumers ignore new fields


def property_names(node, out=None) -> set[str]:
    out = set() if out is None else out
    if isinstance(node, dict):
        for k, v in node.get("properties", {}).items():
            out.add(k)
            property_names(v, out)
        for k, v in node.items():
            if k != "properties":
                property_names(v, out)
    elif isinstance(node, list):
        for v in node:
            property_names(v, out)
    return out


def test_the_json_page_names_exactly_the_schema_s_fields():
    page = (ROOT / "docs" / "json.md").read_text()
    section = page.split("\n## ", 1)[0]  # the page's text before its first subsection
    block = section.split("```\n", 2)[1]
    documented = set(re.findall(r'"(\w+)"\s*(?:\([^)]*\))?\s*:', block))
    assert documented == property_names(SCHEMA)
    assert "nagleprobe/schema/report.schema.json" in section
