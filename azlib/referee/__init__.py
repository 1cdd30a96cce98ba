"""A small GPT trained from scratch by RL against a referee model (avataRL) beside cross-entropy (notebook 07).
Char-level corpus, model, losses and the lock-step loop; no notebook parameters are read here."""

from azlib.referee.data import CharCorpus, load_corpus
from azlib.referee.gpt import GPT, GPTConfig
from azlib.referee.objective import RefereeRLConfig, ce_loss, referee_rl_loss, referee_rewards
from azlib.referee.train import Arms, ArmSpec, TrainConfig

__all__ = ["Arms", "ArmSpec", "CharCorpus", "GPT", "GPTConfig", "RefereeRLConfig", "TrainConfig", "ce_loss",
           "load_corpus", "referee_rewards", "referee_rl_loss"]
