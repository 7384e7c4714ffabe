"""The data flywheel: grow a verified trajectory dataset on devices, round by round (UI-Venus-1.5).

Why: UI-Venus-1.5 expands seed task prompts into concrete tasks with an MLLM, keeps the
semantically unique ones, executes them on cloud devices, verifies the outcomes and feeds the
verified trajectories back as in-context examples of the next expansion round (generation success
17.9 % -> over 70 %); UI-TARS-2 calls the same loop its data flywheel. Here every piece but the
expansion is online RL's machinery, reused rather than repeated: the task pool's builders and its
`dedupe` (embedder + threshold), `collect_groups` on envs from an `EnvSource` (leased devices,
timeouts, replacement), the envs' own success checks, the data stage's judge backends and the
dataset format.

Modules: `seeds` (seed prompts: a file or the task pool's static templates), `space` (where a
seed's tasks are instantiated: the sim phone's generator, feasibility), `web_space` (the same on
MiniWoB++ pages: one seed per task, page seeds as candidates), `expanders` (the registry:
`rules` and `openai`), `openai_expander`, `records`
(trajectories -> dataset records with provenance) and `loop` (the rounds and their report).

The package `__init__` imports nothing: `expanders` is the registry's plugin module, loaded when a
spec is validated, and must stay light.
"""
