"""The simulator: the real agent, scheduler and API server on a virtual cluster.

- `scenario.load_scenario(path)` / `parse_scenario(data)`: a validated `Scenario`
  (`ScenarioError` names the field of any mistake).
- `simulate.simulate(scenario, progress=None, seed=None)`: every policy of the scenario on
  its own simulated cluster over the same workload, as a `SimulationResult`.
- `report.write_report(result, out_dir)`: report.md, report.json, events.csv and charts.
- `runner.PolicySim(scenario, policy, workload)`: one policy, step by step; it composes
  `owners` (batch framework, ReplicaSets), `control` (scheduler and agents on
  `ComponentHost`s), `kubelet`, `machines` (physics on `arrays`) and `recording`.

See docs/simulator.md.
"""
