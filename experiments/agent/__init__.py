"""The ``[agent]`` section wired to agents/: the roles a run's lineages get and the run's
start-up request (roles.py), and what the LLM agent is doing and spending (llm_view.py)."""
