"""Data-quality scoring: judges (rules, an OpenAI-compatible endpoint, a local model), the judgement
cache and the keep / rewrite / rebuild / discard policy of UI-Venus-1.5.

Importing the package registers the `openai` and `local` judge backends (the `rules` judge
registers itself in `venus_core.scoring.rules`, the plugin module), so naming any of the three in
a spec works once the plugin is loaded.
"""

from venus_core.scoring import local_judge, openai_judge  # noqa: F401  (register backends)
