"""The training loop shared by the cross-entropy models (baselines and referees) and the referee-RL models:
arms stepped in lock-step on the same global batches, single process or DDP (torchrun). Not a general trainer."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import torch
from torch.nn.parallel import DistributedDataParallel

from azlib.models.gpt import GPT, cosine_schedule
from azlib.parallel import world
from azlib.referee.data import CharCorpus
from azlib.referee.objective import ce_loss, referee_rl_loss
from azlib.settings import GPTSettings, RefereeRLSettings, RefereeTrainSettings


@dataclass(frozen=True)
class ArmSpec:
    """One model trained in the run. kind "ce": cross-entropy (a baseline, and a referee for others);
    kind "rl": referee RL against the CE arm named `referee` (None: reward from the ground truth only)."""

    name: str
    kind: str  # "ce" | "rl"
    model: GPTSettings
    referee: str | None = None
    rl: RefereeRLSettings = field(default_factory=RefereeRLSettings)
    init_seed: int = 0


@torch.no_grad()
def validation_bits(model: torch.nn.Module, corpus: CharCorpus, cfg: RefereeTrainSettings, device: str) -> float:
    """Bits per character on the fixed held-out windows (every model sees the same ones)."""
    model.eval()
    losses = [ce_loss(model(x.to(device)), y.to(device)).item()
              for x, y in corpus.val_batches(cfg.eval_batches, cfg.eval_batch_size, model.config.block_size, cfg.seed)]
    model.train()
    return sum(losses) / len(losses) / math.log(2)  # nats to bits


class Arms:
    """The models of one run, their optimisers and their logs; `step()` trains every arm on one global batch."""

    def __init__(self, specs: list[ArmSpec], corpus: CharCorpus, cfg: RefereeTrainSettings, device: str = "cpu"):
        names = [s.name for s in specs]
        for s in specs:
            if s.kind == "rl" and s.referee is not None and (s.referee not in names or
                                                              names.index(s.referee) > names.index(s.name)):
                raise ValueError(f"arm {s.name}: its referee {s.referee!r} must be a CE arm listed before it")
        self.specs, self.corpus, self.cfg, self.device = specs, corpus, cfg, device
        self.rank, self.world_size = world()
        if cfg.batch_size % self.world_size:
            raise ValueError(f"batch_size {cfg.batch_size} does not split over {self.world_size} processes")
        self.models, self.optims, self.wrapped = {}, {}, {}
        for s in specs:
            torch.manual_seed(s.init_seed)
            model = GPT(s.model).to(device)
            self.models[s.name] = model
            self.wrapped[s.name] = DistributedDataParallel(model) if self.world_size > 1 else model
            decay = [p for p in model.parameters() if p.dim() >= 2]
            rest = [p for p in model.parameters() if p.dim() < 2]
            self.optims[s.name] = torch.optim.AdamW(
                [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                lr=cfg.learning_rate, betas=(0.9, 0.95))
        self.step_count, self.tokens = 0, 0
        self.seconds = {s.name: 0.0 for s in specs}  # each arm's own compute time
        self.log: list[dict] = []

    def cost_seconds(self, name: str) -> float:
        """Wall time an arm needed: its own steps plus, for an RL arm, its referee's training."""
        spec = next(s for s in self.specs if s.name == name)
        return self.seconds[name] + (self.seconds[spec.referee] if spec.kind == "rl" and spec.referee else 0.0)

    def step(self) -> dict:
        cfg, (rank, n) = self.cfg, (self.rank, self.world_size)
        x, y = self.corpus.batch(self.step_count, cfg.batch_size, self.specs[0].model.block_size, cfg.seed)
        local = slice(rank * cfg.batch_size // n, (rank + 1) * cfg.batch_size // n)
        x, y = x[local].to(self.device), y[local].to(self.device)
        lr = cosine_schedule(self.step_count, cfg.steps, cfg.warmup_steps, cfg.learning_rate)
        referee_logits, record = {}, {"step": self.step_count + 1}
        for s in self.specs:
            start = time.perf_counter()
            logits = self.wrapped[s.name](x)
            if s.kind == "ce":
                loss = ce_loss(logits, y)
                referee_logits[s.name] = logits.detach()  # a referee trained alongside: scored before its update
            else:
                loss, diag = referee_rl_loss(logits, referee_logits.get(s.referee), y, s.rl)
                record.update({f"{s.name}_{k}": v for k, v in diag.items()})
                with torch.no_grad():
                    record[f"{s.name}_train_ce"] = ce_loss(logits, y).item()
            opt = self.optims[s.name]
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad(set_to_none=True)
            loss.backward()
            record[f"{s.name}_grad_norm"] = torch.nn.utils.clip_grad_norm_(
                self.models[s.name].parameters(), cfg.grad_clip).item()
            opt.step()
            record[f"{s.name}_loss"] = loss.item()
            self.seconds[s.name] += time.perf_counter() - start
        self.step_count += 1
        self.tokens += cfg.batch_size * self.specs[0].model.block_size
        record["tokens"] = self.tokens
        return record

    def evaluate(self) -> dict:
        out = {"step": self.step_count, "tokens": self.tokens}
        for s in self.specs:
            out[f"{s.name}_val_bpc"] = validation_bits(self.models[s.name], self.corpus, self.cfg, self.device)
            out[f"{s.name}_seconds"] = self.cost_seconds(s.name)
        return out

    def train(self, progress=None) -> tuple[list[dict], list[dict]]:
        """Run every step; evaluate at step 0, every eval_every steps and at the end.
        Returns (per-step records, evaluations)."""
        evals = [self.evaluate()]
        while self.step_count < self.cfg.steps:
            self.log.append(self.step())
            if self.step_count % self.cfg.eval_every == 0 or self.step_count == self.cfg.steps:
                evals.append(self.evaluate())
            if progress is not None:
                progress.update(1)
        return self.log, evals

    def samples(self, prompt: str, new_tokens: int, seed: int, temperature: float = 0.8) -> dict[str, str]:
        """A continuation of `prompt` from each arm, with the same sampling seed."""
        out = {}
        for name, model in self.models.items():
            g = torch.Generator(device=self.device).manual_seed(seed)
            model.eval()
            ids = model.sample(self.corpus.encode(prompt).unsqueeze(0).to(self.device), new_tokens, temperature, g)
            model.train()
            out[name] = self.corpus.decode(ids[0].tolist())
        return out


def arm_specs(main: GPTSettings, small: GPTSettings, rl: RefereeRLSettings, ablations: list[str],
              seed: int) -> list[ArmSpec]:
    """Notebook 07's arms. Always: "ce" (the cross-entropy baseline, which is also the referee: a referee the
    same size as the model it trains, trained alongside on the same batches) and "rl" (referee RL against it).
    Ablations: "rl_gt_only" (referee weight 0: the reward sees the ground truth only) and "rl_small_referee"
    (against "referee_small", a smaller CE model trained alongside). Every main-size arm starts from one init."""
    specs = [ArmSpec("ce", "ce", main, init_seed=seed), ArmSpec("rl", "rl", main, "ce", rl, seed)]
    if "rl_gt_only" in ablations:
        specs.append(ArmSpec("rl_gt_only", "rl", main, None, replace(rl, referee_weight=0.0), seed))
    if "rl_small_referee" in ablations:
        specs += [ArmSpec("referee_small", "ce", small, init_seed=seed + 1),
                  ArmSpec("rl_small_referee", "rl", main, "referee_small", rl, seed)]
    return specs
