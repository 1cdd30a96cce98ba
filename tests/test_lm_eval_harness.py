"""lm-eval-5shot against lm-evaluation-harness itself: its own `gsm8k` task (only the data source
changed to the local JSONL copy) and HF model on the embedded model, the first test problems."""

from pathlib import Path

import pytest
import yaml

from azlib import evaluation as ev
from azlib.data import load_gsm8k
from azlib.models import DEFAULT_MODEL, make_backend
from azlib.models.loading import resolve_model_path

pytestmark = [pytest.mark.slow, pytest.mark.model]

lm_eval = pytest.importorskip("lm_eval")
PROBLEMS = 10


def harness_samples(gsm8k_dir: Path, tmp_path: Path) -> list[dict]:
    """Run lm-eval's gsm8k task (task file as shipped, data files local) and return its logged samples."""
    from lm_eval.tasks import TaskManager

    task = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml").read_text())
    task.pop("tag")
    task |= {"task": "gsm8k_local", "dataset_path": "json", "dataset_name": None,
             "dataset_kwargs": {"data_files": {s: str(gsm8k_dir / f"{s}.jsonl") for s in ("train", "test")},
                                "cache_dir": str(tmp_path / "datasets")}}
    # The task file is self-contained, so the harness need not index its own task folders (a tenth of its time).
    (tmp_path / "gsm8k_local.yaml").write_text(yaml.safe_dump(task))
    out = lm_eval.simple_evaluate(
        model="hf", model_args={"pretrained": resolve_model_path(DEFAULT_MODEL), "dtype": "float32", "device": "cpu"},
        tasks=["gsm8k_local"], limit=PROBLEMS, log_samples=True, batch_size=1,
        task_manager=TaskManager(include_path=str(tmp_path), include_defaults=False))
    return out["samples"]["gsm8k_local"]


def test_lm_eval_5shot_reproduces_lm_evaluation_harness(gsm8k_dir, tmp_path):
    samples = harness_samples(gsm8k_dir, tmp_path)
    test, train = load_gsm8k(str(gsm8k_dir), "test", limit=PROBLEMS), load_gsm8k(str(gsm8k_dir), "train")
    ours = ev.evaluate(make_backend("hf", batch_size=16), test, "lm-eval-5shot", fewshot=train, max_new_tokens=256)
    draws = ev.lm_eval_shots(train, PROBLEMS)
    assert {int(s["doc_id"]) for s in samples} == set(range(PROBLEMS))
    for s in samples:
        i, metric = int(s["doc_id"]), s["filter"]
        record = ours.records[i]
        assert s["arguments"][0][0] == ev.lm_eval_prompt(test[i]["prompt"], draws[i]), f"problem {i}: prompt differs"
        assert s["resps"][0][0] == record["output"], f"problem {i}: output differs"
        theirs = s["filtered_resps"][0]
        assert (None if theirs == "[invalid]" else ev.lm_eval_clean(theirs)) == record["extracted"][metric]
        assert bool(s["exact_match"]) == record["correct"][metric], f"problem {i}, {metric}: score differs"
    written = [r["output"] for r in ours.records if r["output"].strip()]
    assert len(written) >= PROBLEMS // 2, "the comparison must cover real answers, not empty ones"
    assert any(r["extracted"]["strict-match"] for r in ours.records), "and at least one answer line"
