"""Evaluation: scoring rules, evaluators, predictors and reports.

`metrics` (scoring rules and Wilson intervals, shared by training-time held-out checks and
`venus eval`), `predictors` (the `Predictor` protocol: in-process batched generation, or an
OpenAI-compatible server such as vLLM), `grounding` and `navigation` (the offline evaluators),
`online` and `online_sim` (live episodes on an `Env`; the simulated phone as the default target),
`results` (the result document), `report` / `charts` / `viewer` / `draw` (the self-contained HTML
report), `reference` (published UI-Venus numbers) and `suites` (the `EVAL_SUITES` plugin).
Submodules are imported explicitly; importing this package loads nothing heavy.
"""
