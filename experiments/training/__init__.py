"""Training: RLlib wiring (adapter, configs) and the experiments that train seats."""
