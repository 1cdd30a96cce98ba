"""azlib's GSM8K (and easy arithmetic) task as a verifiers 0.4 taskset: `vf eval azlib-gsm8k`.
Needs the optional extra (`pip install -e '.[verifiers]'`); azlib itself never imports this package."""

from azlib_gsm8k.taskset import AzlibMathConfig, AzlibMathData, AzlibMathTask, AzlibMathTaskConfig, AzlibMathTaskset

__all__ = ["AzlibMathConfig", "AzlibMathData", "AzlibMathTask", "AzlibMathTaskConfig", "AzlibMathTaskset"]
