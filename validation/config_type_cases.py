#!/usr/bin/env python3
"""Writes fixtures/hf/config_type_cases.json: for every typed field of every config class in
crates/vramscope-formats/data/hf_config_types.rs (validation/hf_config_defaults.py), which of a fixed list of JSON values
transformers' strict validation accepts ("a"), refuses with a `StrictDataclassFieldValidationError`
naming the field for its type ("r"), refuses by a value validator of the field ("v": Llama's
`initializer_range` interval), or fails on for another reason ("-": the class's own checks, a
derived field). "v" and "-" are not compared. A unit test in `crates/vramscope-formats/src/hf/config_types.rs` holds vramscope's reading of
the types table to it: every
"r" must be refused and every "a" accepted.

Run in the truth venv (transformers 5.23):
    ~/.venvs/truth/bin/python validation/config_type_cases.py
"""
import copy
import dataclasses
import json
import pathlib
import sys
import warnings

import transformers
from huggingface_hub.dataclasses import type_validator
from huggingface_hub.errors import StrictDataclassFieldValidationError

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from hf_config_defaults import MODEL_TYPES, TYPED_ONLY, rust_type  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "fixtures/hf/config_type_cases.json"
VALUES = [None, 0, 3, -1, 1.5, 2.0, 1e-06, True, False, "x", "relu", "regression", [], [1], ["a"], [1.5],
          {}, {"a": "b"}, {"0": "LABEL_0"}, {"a": 1}]


def verdict(cls, field, value):
    try:
        # the classes change the dicts they are given (rope_parameters)
        cls.from_dict({field: copy.deepcopy(value)})
    except StrictDataclassFieldValidationError as e:
        if f"'{field}'" not in str(e):
            return "-"
        try:
            type_validator(field, value, cls.__dataclass_fields__[field].type)
        except TypeError:
            return "r"
        return "v"
    except Exception:
        return "-"
    return "a"


def main() -> None:
    cases = {}
    for mt in MODEL_TYPES + TYPED_ONLY:
        cls = transformers.CONFIG_MAPPING[mt]
        cases[mt] = {f.name: "".join(verdict(cls, f.name, v) for v in VALUES)
                     for f in dataclasses.fields(cls) if rust_type(f.type) != "Any"}
    lines = [f' "transformers_version": {json.dumps(transformers.__version__)},',
             f' "values": {json.dumps(VALUES)},', ' "cases": {']
    lines += [f'  {json.dumps(mt)}: {json.dumps(c)},' for mt, c in cases.items()]
    lines[-1] = lines[-1].rstrip(",")
    OUT.write_text("{\n" + "\n".join(lines) + "\n }\n}\n")
    n = sum(len(c) for c in cases.values())
    print(f"{OUT}: {n} fields x {len(VALUES)} values")


if __name__ == "__main__":
    main()
