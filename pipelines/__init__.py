"""Kubeflow pipeline definitions: `gui_agent.build_pipeline(spec)`, compile / submit / local run."""
