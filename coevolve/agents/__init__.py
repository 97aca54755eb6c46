"""Multi-turn agents: batched rollouts in AgentTask environments, ES on
trajectories, Agent Skills and Trace2Skill distillation."""
