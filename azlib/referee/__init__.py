"""A small GPT trained from scratch by RL against a referee model (avataRL) beside cross-entropy (notebook 07).
Char-level corpus, model, losses and the lock-step loop; no notebook parameters are read here."""

from azlib.models.gpt import GPT
from azlib.referee.data import CharCorpus, load_corpus
from azlib.referee.objective import ce_loss, referee_rl_loss, referee_rewards
from azlib.referee.train import Arms, ArmSpec
from azlib.settings import GPTSettings, RefereeRLSettings, RefereeTrainSettings

__all__ = ["Arms", "ArmSpec", "CharCorpus", "GPT", "GPTSettings", "RefereeRLSettings", "RefereeTrainSettings",
           "ce_loss", "load_corpus", "referee_rewards", "referee_rl_loss"]
