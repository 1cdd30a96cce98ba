"""The training loop for real on the embedded model: signals from searches and samples, checkpoints,
kill -9 and resume (same final metrics as an uninterrupted run), damaged checkpoints, token budgets."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from azlib.lab import config
from azlib.lab.cli import main
from azlib.data import arithmetic_problems
from azlib.grpo import GRPOSettings
from azlib.games.text.forking import ForkingSearch
from azlib.games.text.signals import forked_groups, tree_groups
from azlib.mcts import search
from azlib.games.text.env import TEXT_SEARCH_SAMPLING, TextEnv
from azlib.models import ModelLoadError
from azlib.models.student import LoraSettings, Student
from azlib.prompts import chat_prompt
from azlib.rewards import RewardWeights, answer_reward
from azlib.settings import AnswerSampling, ForkSettings, SearchSettings, TextSearchSettings
from azlib.teachers import TeacherEnsemble, TeacherSpec
from azlib.games.text.explorers import accuracy_column
from azlib.lab.from_params import trainer_from_params, training_problems
from azlib.settings import TrainerSettings, TrainSettings
from azlib.training import CheckpointError, Trainer
from conftest import tiny_grpo

pytestmark = pytest.mark.model  # every test trains or loads the embedded student

TIMING = {"seconds", "ram_peak_mb", "vram_peak_mb"}  # what may differ between two identical runs


def train_cli(out, *extra):
    return [sys.executable, "-m", "azlib", "train", "--profile", "smoke", "--out", str(out), *extra]


def read_log(out):
    lines = (out / "train-04" / "train_log.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if k not in TIMING} for x in lines]


@pytest.mark.slow  # about half a minute: three training subprocesses
def test_kill_minus_9_and_resume_ends_like_an_uninterrupted_run(tmp_path, tiny_model_dir):
    """On a tiny student, 20 GRPO steps of about 0.3 s: the kill lands in one of the first few, and the resumed
    run must restore the adapter, the optimiser and the random state to reproduce the rest."""
    steps = 20
    whole = tmp_path / "whole"
    subprocess.run(train_cli(whole, *tiny_grpo(tiny_model_dir, steps)), check=True, cwd=config.REPO_ROOT,
                   capture_output=True, timeout=900)
    reference = read_log(whole)
    assert [r["step"] for r in reference] == list(range(1, steps + 1))
    assert all(r["update/grad_norm"] > 0 for r in reference), "every step changes the weights"

    killed = tmp_path / "killed"
    proc = subprocess.Popen(train_cli(killed, *tiny_grpo(tiny_model_dir, steps)), cwd=config.REPO_ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = killed / "train-04" / "checkpoints" / "step-000001"
    deadline = time.monotonic() + 600
    while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be killed; the test needs a longer run"
    delay = random.Random(7).uniform(0.0, 1.0)  # seeded: a failure is reproduced by the same moment
    time.sleep(delay)  # somewhere in the next steps: searching, updating, or writing a checkpoint
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = [r["step"] for r in read_log(killed)]
    assert done and done[-1] < steps, "killed before the end"

    subprocess.run(train_cli(killed, *tiny_grpo(tiny_model_dir, steps), "--resume"), check=True, cwd=config.REPO_ROOT,
                   capture_output=True, timeout=900)
    resumed = read_log(killed)
    assert [r["step"] for r in resumed] == list(range(1, steps + 1)), "every step once: none lost, none twice"
    assert resumed == reference, "a resumed seeded run equals the uninterrupted one, metric for metric"


@pytest.fixture(scope="module")
def student():
    return Student("embedded:smollm2-135m-instruct", lora=LoraSettings(r=4))


def small_trainer(student, folder, teachers=None, **settings):
    rows = arithmetic_problems(4, seed=0, steps=(1,))
    return Trainer(student, rows, folder, teachers=teachers, settings=TrainerSettings(
        train=TrainSettings(**{"update": "grpo", "problems_per_step": 2, "max_new_tokens": 12, **settings}),
        grpo=GRPOSettings(micro_batch_size=4), search=SearchSettings(num_simulations=3, max_depth=2, skip_solved=True),
        text=TextSearchSettings(student_samples=2, chunk_tokens=6)))


def test_signals_from_trees_and_from_samples(student):
    rows = arithmetic_problems(2, seed=1, steps=(1,))
    env = TextEnv(student.backend, rows, TextSearchSettings(expansion="chunk", student_samples=2, chunk_tokens=6),
                  replace(TEXT_SEARCH_SAMPLING, max_new_tokens=18), reward="combined")
    results = search(env, [env.root(i) for i in range(2)], SearchSettings(num_simulations=4, max_depth=3),
                     random.Random(0))
    paths = tree_groups(results, env, "paths")
    assert {r.group for r in paths} == {0, 1} and {r.answer.problem for r in paths} == {0, 1}, "one group per problem"
    assert all(r.prompt_ids == list(env.context(r.answer.problem)) and r.reward == r.answer.breakdown.total for r in paths)
    for kind in ("siblings", "visits"):
        siblings = tree_groups(results, env, kind)
        assert siblings, "an expanded root with visited children makes a group"
        for g in {r.group for r in siblings}:
            members = [r for r in siblings if r.group == g]
            assert len(members) >= 2 and len({tuple(r.prompt_ids) for r in members}) == 1
            assert all(r.answer is None for r in members), "a sibling step is not a whole answer"
            if kind == "visits":
                assert sum(r.reward for r in members) == pytest.approx(1.0)
    trees = ForkingSearch(student.backend, rows, ForkSettings(rounds=0),
                          sampling=AnswerSampling(temperature=1.0, max_new_tokens=12)).grow([0, 1], 3, seed=0)
    sampled, tokens = forked_groups(trees, student.backend), sum(t.tokens for t in trees)
    assert len(sampled) == 6 and [r.group for r in sampled] == [0, 0, 0, 1, 1, 1] and 0 < tokens <= 72
    assert all(len(r.completion_ids) <= 12 + r.answer.eos and r.prompt_ids for r in sampled), "token ids from creation"
    direct = student.backend.generate([chat_prompt(r["prompt"]) for r in rows], n=3, max_new_tokens=12,
                                      temperature=1.0, seed=0, stop_at_answer=True)
    eos = student.backend.eos_ids
    assert [r.completion_ids for r in sampled] == [
        list(s.token_ids) + [student.tokenizer.eos_token_id] * (r.answer.finished and not (s.token_ids and s.token_ids[-1] in eos))
        for r, s in zip(sampled, [s for group in direct for s in group])], \
        "the ids trained are the ids sampled (no decode and re-encode), EOS after a finished answer"


def test_finished_answers_reach_the_groups_under_the_trainings_own_search(student):
    """A finished child (a terminal beside open siblings) is entered once, so it is a visited leaf and its answer
    reaches the groups, under the training's own search settings (skip_solved, which never enters a solved
    node: were finished children created solved and unvisited, no finished answer would ever be trained on)."""
    params = config.validate("04_gsm8k_run", {**config.notebook_defaults(config.NOTEBOOKS_DIR / "04_gsm8k_run.ipynb"),
                                              **config.load_profile("smoke", "04_gsm8k_run"), "output_dir": "x"})
    training = TrainerSettings(train=replace(params.train, reward="combined"),
                              search=replace(params.search, num_simulations=8, max_depth=3),
                              text=replace(params.text, expansion="chunk", student_samples=3, chunk_tokens=40))
    trainer = Trainer(student, arithmetic_problems(2, seed=3, steps=(1,)), "/nonexistent", training)
    env = trainer.explorer.env
    results = search(env, [env.root(i) for i in range(2)], trainer.settings.search, random.Random(0))
    finished_leaves = [n for r in results for i in r.tree.leaves() if (n := r.tree.nodes[i]).state.answer.finished]
    assert finished_leaves, "a finished child (a terminal beside open siblings) is entered once: a visited leaf"
    paths = tree_groups(results, env, "paths")
    assert any(r.answer.finished for r in paths), "finished answers are among the paths trained on"
    assert all(r.completion_ids[-1] == student.tokenizer.eos_token_id for r in paths if r.answer.eos), \
        "an EOS-ended answer keeps EOS"


def test_rollout_search_writes_whole_answers_valued_by_their_reward(student):
    rows = arithmetic_problems(2, seed=4, steps=(1,))
    env = TextEnv(student.backend, rows, TextSearchSettings(student_samples=3),
                  replace(TEXT_SEARCH_SAMPLING, temperature=0.7, max_new_tokens=64))
    settings = SearchSettings(num_simulations=3, max_depth=6, skip_solved=True, q_transform="parent_value")
    results = search(env, [env.root(i) for i in range(2)], settings, random.Random(0))
    answers = tree_groups(results, env, "answers")
    assert len(answers) >= 6 and {r.group for r in answers} == {0, 1}
    assert all(r.reward == float(r.correct) for r in answers), "correctness: 1 for a finished correct answer, else 0"
    for r in results:
        root = r.tree.root
        assert root.visits == sum(r.tree.nodes[c].visits for c in root.children), "each rollout is one visit"
        for i in root.children:
            child = r.tree.nodes[i]
            rollouts = child.info["rollouts"]
            assert child.visits >= len(rollouts)
            assert rollouts[0].text.startswith(child.state.answer.text)
        for node in r.tree.nodes:  # leaves of every depth share one generate call: each keeps its own cap
            for rollout in node.info.get("rollouts", []):
                assert len(rollout.token_ids) <= 64, "an answer never runs past the cap"


def _common_prefix(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def test_tree_answers_train_on_the_ids_sampled_never_re_encoded(student, monkeypatch):
    rows = arithmetic_problems(2, seed=4, steps=(1,))
    sampled = []
    generate = student.backend.generate

    def recording(*args, **kwargs):
        out = generate(*args, **kwargs)
        sampled.extend(tuple(s.token_ids) for group in out for s in group)
        return out

    monkeypatch.setattr(student.backend, "generate", recording)
    env = TextEnv(student.backend, rows, TextSearchSettings(student_samples=3),
                  replace(TEXT_SEARCH_SAMPLING, temperature=0.7, max_new_tokens=48))
    settings = SearchSettings(num_simulations=2, max_depth=3, skip_solved=True)
    results = search(env, [env.root(i) for i in range(2)], settings, random.Random(0))

    def no_re_encoding(*args, **kwargs):
        raise AssertionError("a searched answer was re-encoded")

    monkeypatch.setattr(student.backend, "encode_continuation", no_re_encoding)
    eos = student.tokenizer.eos_token_id
    for kind in ("answers", "paths"):
        rollouts = tree_groups(results, env, kind)
        assert rollouts
        for r in rollouts:
            ids = tuple(r.completion_ids[:-1] if r.answer.eos and r.completion_ids[-1] == eos else r.completion_ids)
            assert student.tokenizer.decode(list(ids), skip_special_tokens=True) == r.answer.text
            # sampled pieces end to end: a first line, then the rollout (or chunk) sampled after it, cut at the answer line
            ends = {0}
            for position in range(len(ids)):
                if position in ends:
                    ends |= {position + k for s in sampled for k in range(1, _common_prefix(s, ids[position:]) + 1)}
            assert len(ids) in ends, "made of sampled ids"


def test_every_mcts_rollout_is_trained_on_the_ids_it_was_sampled_with(student, tmp_path, monkeypatch):
    """Under a chat template that trims each message's content, a partial answer written back into the template loses
    its trailing newline. The search continues from ids, so in every MCTS signal each sequence the update receives
    (prompt and completion ids) is a generate call's prompt ids followed by ids that call returned, and every generate
    call's prompt is the question's chat prompt or such a sequence: nothing was decoded and re-encoded."""
    import copy

    backend, eos = student.backend, student.tokenizer.eos_token_id
    trimming = copy.deepcopy(backend.tokenizer)
    trimming.chat_template = trimming.chat_template.replace("message['content']", "message['content'] | trim")
    assert "| trim" in trimming.chat_template
    monkeypatch.setattr(backend, "tokenizer", trimming)
    prompts, sampled = [], set()
    generate = backend.generate

    def recording(batch, **kwargs):
        out = generate(batch, **kwargs)
        for prompt, group in zip(batch, out):
            prompts.append(tuple(backend.encode_prompt(prompt)))
            sampled.update((prompts[-1], tuple(s.token_ids)) for s in group)
        return out

    def as_sampled(ids: tuple) -> bool:
        """A generate call's prompt ids, then ids that call returned."""
        return any(ids[:len(p)] == p and len(ids) > len(p) and ids[len(p):] == s[:len(ids) - len(p)]
                   for p, s in sampled)

    monkeypatch.setattr(backend, "generate", recording)
    rows = arithmetic_problems(2, seed=4, steps=(1,))
    chat = {tuple(backend.encode_prompt(chat_prompt(r["prompt"]))) for r in rows}
    for kind in ("answers", "paths", "siblings", "visits"):
        trainer = Trainer(student, rows, tmp_path / kind, settings=TrainerSettings(
            train=TrainSettings(signal=kind, update="grpo", problems_per_step=2, max_new_tokens=32),
            search=SearchSettings(num_simulations=3, max_depth=3, leaves_per_step=2, skip_solved=True),
            text=TextSearchSettings(student_samples=3)))
        received = []
        monkeypatch.setattr(trainer.policy_update, "step", lambda rollouts: received.extend(rollouts) or {})
        trainer.train_step()
        assert received and (kind in ("answers", "paths") or len({r.group for r in received}) < len(received))
        for r in received:
            ids = tuple(r.prompt_ids) + tuple(r.completion_ids)
            eos_added = r.answer is not None and r.answer.eos and ids[-1] == eos
            assert as_sampled(ids) or (eos_added and as_sampled(ids[:-1])), (kind, r.answer)
    assert all(p in chat or as_sampled(p) for p in prompts), "each partial answer continued as it was sampled"
    assert any(p not in chat and backend.writes_newline(p[-1]) for p in prompts), \
        "a partial answer ending in a newline (what the trimming template drops) was continued"


def test_an_answer_that_only_stopped_is_trained_on_its_eos(student, tmp_path, monkeypatch):
    """GRPO trains every completion, as TRL does: an answer whose one sampled id is the EOS has no text, and its
    rollout reaches the update with that id, so stopping at once is trained on like any wrong answer."""
    from azlib.models.generation import Sample

    backend, eos = student.backend, student.tokenizer.eos_token_id
    generate = backend.generate

    def first_stops(batch, **kwargs):
        out = generate(batch, **kwargs)
        first = out[0][0]
        out[0][0] = Sample("", (eos,), first.logprobs[:1], "stop", first.prompt_tokens, 1)
        return out

    monkeypatch.setattr(backend, "generate", first_stops)
    trainer = small_trainer(student, tmp_path, steps=1, signal="independent")
    received = []
    monkeypatch.setattr(trainer.policy_update, "step", lambda rollouts: received.extend(rollouts) or {})
    trainer.train_step()
    stopped = [r for r in received if not r.answer.text]
    assert len(stopped) == 1 and list(stopped[0].completion_ids) == [eos] and stopped[0].reward == 0.0
    assert len(received) == trainer.settings.train.problems_per_step * trainer.settings.train.group_size


def test_each_answers_reward_is_computed_once(student, monkeypatch):
    """Each state and each rollout is scored when it is made; the search values them, tree_answers collects them,
    search_answer grades the recommended one without scoring anything again."""
    import azlib.sampled_answer as answer_module
    from azlib.games.text.env import search_answer

    computed = []

    def counted(*args, **kwargs):
        computed.append((args, tuple(sorted(kwargs.items()))))
        return answer_reward(*args, **kwargs)

    monkeypatch.setattr(answer_module, "answer_reward", counted)
    rows = arithmetic_problems(2, seed=4, steps=(1,))
    env = TextEnv(student.backend, rows, TextSearchSettings(student_samples=3),
                  replace(TEXT_SEARCH_SAMPLING, temperature=0.7, max_new_tokens=48))
    settings = SearchSettings(num_simulations=4, max_depth=3, skip_solved=True)
    results = search(env, [env.root(i) for i in range(2)], settings, random.Random(0))
    made = sum(len(r.tree.nodes) + sum(len(n.info.get("rollouts", [])) for n in r.tree.nodes) for r in results)
    assert len(computed) == made, "one computation per state (the roots too) and per rollout"
    answers = tree_groups(results, env, "answers")
    graded = [search_answer(r) for r in results]
    assert answers and graded and len(computed) == made, "the readers after the search find every reward computed"


def test_imitation_step_raises_the_likelihood_of_verified_answers(student):
    from azlib.grpo import PolicyUpdate
    from azlib.sampled_answer import scored_answer
    from azlib.games.text.signals import answer_rollout, verified

    rows = arithmetic_problems(1, seed=5, steps=(1,))
    backend = student.backend
    ids = backend.encode_prompt([{"role": "user", "content": rows[0]["prompt"]}])

    def rollout(text):
        written = backend.encode_continuation(text)
        answer = scored_answer(backend, 0, rows[0]["answer"], written, [0.0] * len(written), True, kind="correctness",
                               weights=RewardWeights())
        return answer_rollout(backend, 0, ids, answer)

    good, bad = rollout(rows[0]["info"]["solution"]), rollout("#### 0")
    assert good.answer.finished and bad.answer.finished and good.completion_ids[-1] == student.tokenizer.eos_token_id
    assert verified([good, bad, good]) == [good], "finished, correct, once each"
    examples = [good]
    before = student.token_logprobs([examples[0].prompt_ids], [examples[0].completion_ids])[0].sum().item()
    saved = [p.detach().clone() for p in student.trainable_parameters()]
    trainer = PolicyUpdate(student, GRPOSettings(learning_rate=1e-3, warmup_steps=0))
    try:
        for _ in range(3):
            stats = trainer.sft_step(examples)
        after = student.token_logprobs([examples[0].prompt_ids], [examples[0].completion_ids])[0].sum().item()
    finally:  # the module's other tests share this student
        with torch.no_grad():
            for p, old in zip(student.trainable_parameters(), saved):
                p.copy_(old)
    assert stats["sequences"] == 1 and after > before + 1.0


def test_the_accuracy_column_is_the_one_each_kind_of_run_logs(student, tmp_path):
    """What the progress bar and notebook 04's curves read: a search's answer accuracy, or the student's own."""
    for signal in ("answers", "independent"):
        record = small_trainer(student, tmp_path / signal, signal=signal, group_size=2).train_step()
        assert accuracy_column(signal) in record, (signal, sorted(record))
    assert accuracy_column("answers") != accuracy_column("independent")
    with pytest.raises(ValueError, match="signal must be one of .* got 'sample'"):
        accuracy_column("sample")


def test_every_training_signal_has_an_explorer():
    """The train.signal the settings accept are EXPLORER_OF's, each grown by one of the two explorers."""
    from azlib.settings import EXPLORER_OF, SIGNAL_KINDS, TrainSettings

    assert SIGNAL_KINDS == tuple(EXPLORER_OF) and set(EXPLORER_OF.values()) == {"tree", "fork"}
    assert [TrainSettings(signal=kind).signal for kind in SIGNAL_KINDS] == list(SIGNAL_KINDS)
    with pytest.raises(ValueError, match="signal"):
        TrainSettings(signal="sample")


def test_a_steps_log_line_keeps_every_part_under_its_namespace(student, tmp_path):
    """A GRPO step on the embedded student: the step's own fields bare, the update's statistics under update/,
    the search's under search/, the whole answers' reward parts under reward/; the step's reward_mean (every answer's)
    stays beside GRPO's (over the rollouts it was given). Sibling steps are not answers: their line has no reward/ part."""
    trainer = small_trainer(student, tmp_path / "answers", steps=1, signal="answers")
    line = trainer.train_step()
    spaced = {key.split("/")[0] for key in line if "/" in key}
    assert spaced == {"update", "search", "reward"}
    assert {"update/loss", "update/kl", "update/clip_low", "update/clip_high", "update/grad_norm",
            "update/zero_std_groups", "update/reward_mean", "search/answers", "reward/hre"} <= line.keys()
    assert {"step", "position", "tokens", "seconds", "verified", "solved", "completions", "completion_correct",
            "reward_mean", "truncated", "answer_accuracy", "ram_peak_mb"} <= line.keys()
    assert not {"loss", "kl", "grad_norm", "answers", "reward_hre"} & line.keys(), "no part's key stands bare"
    siblings = small_trainer(student, tmp_path / "siblings", steps=1, signal="siblings").train_step()
    assert siblings["completions"] > 0 and "update/loss" in siblings
    assert not [key for key in siblings if key.startswith("reward/")], "a sibling step has no reward parts"


def test_an_existing_run_needs_resume_and_damage_is_named(student, tmp_path):
    trainer = small_trainer(student, tmp_path, steps=1)
    tree, forks = trainer.explorer_for("answers"), trainer.explorer_for("forked")
    assert tree.env.sampling == forks.forking.sampling == trainer.policy_update.sampling == AnswerSampling(
        temperature=0.7, top_p=1.0, max_new_tokens=12), "the search, the forks and the update read the run's sampling"
    log = trainer.run(progress=False)
    assert len(log) == 1 and log[0]["completions"] > 0 and log[0]["tokens"] > 0
    with pytest.raises(CheckpointError, match="already holds a training run; pass resume=True"):
        small_trainer(student, tmp_path, steps=2).run(progress=False)
    (latest,) = trainer.list_checkpoints()
    (latest / "optimizer.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="step-000001 is damaged"):
        small_trainer(student, tmp_path, steps=2).run(resume=True, progress=False)
    trainer.save_checkpoint()
    # a resume continues the same run: other settings are refused and named (steps may grow)
    with pytest.raises(CheckpointError, match=r"Differs: train.temperature: saved 0.7, now 0.3$"):
        small_trainer(student, tmp_path, steps=2, temperature=0.3).run(resume=True, progress=False)
    with pytest.raises(CheckpointError, match="Differs: problems: saved '[0-9a-f]{16}', now '[0-9a-f]{16}'"):
        Trainer(student, arithmetic_problems(4, seed=1, steps=(1,)), tmp_path, trainer.settings).run(resume=True,
                                                                                                 progress=False)
    state = json.loads((latest / "state.json").read_text())
    (latest / "state.json").write_text(json.dumps(state | {"replay": [{"problem": 0, "group": 0, "text": "#### 1"}]}))
    with pytest.raises(CheckpointError, match=r"replay buffer of another shape \(KeyError: 'answer'\); start a new run"):
        small_trainer(student, tmp_path, steps=2).run(resume=True, progress=False)
    trainer.save_checkpoint()
    (latest / "adapter" / "adapter_model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ModelLoadError, match="the checkpoint is damaged"):
        small_trainer(student, tmp_path, steps=2).run(resume=True, progress=False)


def test_a_resume_drops_only_a_last_line_cut_short_and_names_any_other_damage(student, tmp_path):
    trainer = small_trainer(student, tmp_path, steps=2, checkpoint_every=1)
    trainer.run(progress=False)
    log = trainer.log_path.read_text().splitlines()
    trainer.log_path.write_text(f"{log[0]}\n{log[1][:20]}\n")  # a kill cut step 2's line short
    (trainer.checkpoints / "step-final").mkdir()  # a folder of another name is no checkpoint
    resumed = small_trainer(student, tmp_path, steps=2, checkpoint_every=1).run(resume=True, progress=False)
    assert [r["step"] for r in resumed] == [1] and trainer.log_path.read_text() == log[0] + "\n"
    trainer.log_path.write_text(f"{log[0][:20]}\n{log[1]}\n")  # damaged, with a whole line after it
    with pytest.raises(CheckpointError, match=r"train_log.jsonl, line 1, is not a step's record .* repair or remove"):
        small_trainer(student, tmp_path, steps=2, checkpoint_every=1).run(resume=True, progress=False)
    assert trainer.log_path.read_text() == f"{log[0][:20]}\n{log[1]}\n", "nothing rewritten"
    latest = trainer.list_checkpoints()[-1]
    state = json.loads((latest / "state.json").read_text())
    (latest / "state.json").write_text(json.dumps({k: v for k, v in state.items() if k != "step"}))
    with pytest.raises(CheckpointError, match=r"step-000002 is damaged \(state.json lacks \['step'\]\)"):
        small_trainer(student, tmp_path, steps=2, checkpoint_every=1).run(resume=True, progress=False)


def test_the_replay_comes_back_from_a_checkpoint_equal_answers_and_all(student, tmp_path):
    """The imitation replay is saved with each rollout's Answer (its RewardBreakdown inside) and the values reward
    functions added, and a resumed trainer reads back the same rollouts; each holds its tree's Answer, not a copy."""
    trainer = small_trainer(student, tmp_path, update="sft")
    trees = ForkingSearch(student.backend, trainer.problems, ForkSettings(rounds=0),
                          sampling=AnswerSampling(temperature=1.0, max_new_tokens=12)).grow([0, 1], 2, seed=0)
    rollouts = forked_groups(trees, student.backend, "treerl")
    assert all(r.answer is t.nodes[leaf].answer for r, (t, leaf) in
               zip(rollouts, [(t, leaf) for t in trees for leaf in t.answer_ends()], strict=True)), "shared, not copied"
    bonus = replace(rollouts[0], reward=rollouts[0].reward + 0.5, added={"brief_bonus": 0.5})
    trainer.replay = [*rollouts, bonus]
    trainer.save_checkpoint()
    resumed = small_trainer(student, tmp_path, update="sft")
    resumed.restore_latest()
    assert resumed.replay == trainer.replay and resumed.replay[-1].added == {"brief_bonus": 0.5}
    assert resumed.replay[0].answer.breakdown == rollouts[0].answer.breakdown


def test_resume_takes_the_newest_run_folder_that_holds_a_checkpoint(tmp_path, monkeypatch, tiny_model_dir, capsys):
    """Notebook 04's resume = True in JupyterLab, over two real run folders: the older holds a 2-step run's
    checkpoints, the newer only what a run stopped in its first step leaves. The resume takes the older, says which
    folder and step, and the notebook's trainer there continues with step 3."""
    monkeypatch.setattr(config, "INTERACTIVE_RUNS", str(tmp_path / "interactive"))
    older, newer = (tmp_path / "interactive" / f"04_gsm8k_run-20250101-{t}" for t in ("090000", "100000"))
    assignments = [f"model={tiny_model_dir}", "train.steps=2"]
    assert main(["train", "--profile", "smoke", "--out", str(older), "--set", *assignments]) == 0
    (newer / "train-04").mkdir(parents=True)
    before = (older / "train-04" / "train_log.jsonl").read_text().splitlines()
    values = config.resolve_library("04_gsm8k_run", "smoke", Path(config.INTERACTIVE_RUNS), assignments)[0].model_dump()
    capsys.readouterr()

    params = config.from_namespace("04_gsm8k_run", values | {"resume": True, "train": values["train"] | {"steps": 3}})
    said = capsys.readouterr().out
    assert params.output_dir == str(older)
    assert f"resume = True: continuing {older}: train-04 from step 2" in said
    assert f"passed over 1 newer run folder(s) without a checkpoint: {newer.name}" in said
    with trainer_from_params(params, Path(params.output_dir) / "train-04", training_problems(params)[0]) as trainer:
        log = trainer.run(resume=params.resume, progress=False)
    assert [r["step"] for r in log] == [1, 2, 3] and log[:2] == [json.loads(line) for line in before], \
        "steps 1 and 2 are the older run's, read back; only step 3 is new"


def test_a_resumed_run_with_teachers_asks_and_weighs_them_as_the_uninterrupted_one(tmp_path, tiny_model_dir):
    """The teachers' weight rule is learned state, and which teachers a node asks is random: both must come
    back on resume, or a resumed run with teachers is another run. (A tiny student, its own teachers.)"""
    student = Student(tiny_model_dir, lora=LoraSettings(r=4))
    start = tmp_path / "start-adapter"
    student.save_adapter(start)

    def run(folder, steps, resume=False):
        student.load_adapter(start)  # every run starts from the same weights
        teachers = TeacherEnsemble([TeacherSpec(name=n, backend="hf", model=tiny_model_dir, tier="cpu", persona=n)
                                    for n in ("tutor", "terse")], shared={tiny_model_dir: student.backend},
                                   per_node=1, seed=0)
        trainer = small_trainer(student, folder, teachers=teachers, steps=steps)
        log = trainer.run(resume=resume, progress=False)
        return [{k: v for k, v in r.items() if k not in TIMING} for r in log], teachers

    whole, whole_teachers = run(tmp_path / "whole", 2)
    credited = whole_teachers.rule.credited
    assert sum(credited.values()) > 0 and whole_teachers.rule.history, "the teachers took part and were weighed"
    run(tmp_path / "cut", 1)
    resumed, resumed_teachers = run(tmp_path / "cut", 2, resume=True)
    assert resumed == whole
    assert resumed_teachers.rule.state() == whole_teachers.rule.state()
    assert [t.stats.requests for t in resumed_teachers.teachers] != [0, 0], "the resumed step asked teachers"
    with pytest.raises(CheckpointError, match="belongs to a run with teachers, and this one has none"):
        student.load_adapter(start)
        small_trainer(student, tmp_path / "cut", steps=3).run(resume=True, progress=False)


def test_a_run_asks_the_teachers_it_is_given_behind_their_own_server(tmp_path, tiny_model_dir, server_factory):
    """`teachers` in place of a tier: each teacher behind its own server (here a scripted one on 127.0.0.1, as a
    `vllm serve` on a GPU of its own would be); the run's ensemble is made of them, and its forks ask them."""
    server, url = server_factory()
    values = {**config.notebook_defaults(config.NOTEBOOKS_DIR / "04_gsm8k_run.ipynb"),
              **config.load_profile("smoke", "04_gsm8k_run"), "output_dir": str(tmp_path), "model": tiny_model_dir,
              "teachers": [{"name": "served", "backend": "openai", "model": "teacher", "tier": "vllm",
                            "base_url": url}]}
    values["train"] = {**values["train"], "signal": "forked", "update": "sft", "steps": 1}
    values["fork"] = {"writer": "teachers", "fork_from": "any"}
    params = config.validate("04_gsm8k_run", values)
    assert params.teacher_tier == "none"
    with trainer_from_params(params, tmp_path / "train", arithmetic_problems(2, seed=0, steps=(1,))) as trainer:
        assert [t.name for t in trainer.teachers.teachers] == ["served"]
        trainer.run(progress=False)
        stats = trainer.teachers.by_name["served"].stats
    assert stats.requests == len(server.requests) > 0 and stats.failures == 0
    assert stats.tokens == 2 * stats.requests, "each scripted answer is 2 completion tokens, all of them received"
    assert {path for path, _, _ in server.requests} == {"/v1/chat/completions"}
    with pytest.raises(ValueError, match="needs teachers"):
        trainer_from_params(params.model_copy(update={"teachers": []}), tmp_path / "none", [])


def test_a_token_budget_stops_training(student, tmp_path):
    trainer = small_trainer(student, tmp_path, steps=50, signal="independent", group_size=2, max_new_tokens=8,
                            problems_per_step=8, token_budget=150)
    log = trainer.run(progress=False)
    assert trainer.tokens >= 150 and trainer.tokens - log[-1]["tokens"] < 150, "stops at the first step past the budget"
    assert len(log) == 2 and log[0]["completions"] == 16
    assert log[-1]["completions"] < 16 and trainer.tokens - 150 < log[0]["tokens"] / 4, "the last step fits the budget"
