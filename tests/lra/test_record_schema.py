"""result.json has one schema (lra.run.record): the writers write only declared fields, the collector requires its
own."""

from __future__ import annotations

import json

import pytest

from analyses.record import write_analysis_record
from lra.run.record import REQUIRED_FIELDS, AnalysisRecord, RequiredFields, RunRecord, new_record
from results.collect import MalformedRecord, read_record
from tests.lra.conftest import compose_run


def test_a_new_run_record_holds_declared_fields_only(tmp_path):
    record = new_record(compose_run(["task=listops", "attention=linear"]), tmp_path)
    assert set(RequiredFields.__annotations__) <= set(record) <= set(RunRecord.__annotations__)


def test_an_analysis_record_holds_exactly_the_declared_fields(tmp_path):
    path = write_analysis_record("demo", [{"p": 2, "value": 1.0}], keys=["p"], config={}, started=0.0,
                                 out_root=tmp_path)
    assert set(json.loads(path.read_text())) == set(AnalysisRecord.__annotations__)


def test_the_collector_refuses_a_record_without_a_required_field(tmp_path):
    record = {"task": "listops", "attention": "linear", "seed": 0, "status": "completed", "metrics": {}}
    assert REQUIRED_FIELDS == ("task", "attention", "seed", "status")
    for field in REQUIRED_FIELDS:
        path = tmp_path / field / "result.json"
        path.parent.mkdir()
        path.write_text(json.dumps({k: v for k, v in record.items() if k != field}))
        with pytest.raises(MalformedRecord, match=field):
            read_record(path)
