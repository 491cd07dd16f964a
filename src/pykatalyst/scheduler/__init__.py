"""pykatalyst.scheduler: Katalyst's QoS- and NUMA-aware scheduling in a kube-scheduler-shaped
framework.

- `config`: KubeSchedulerConfiguration loading, defaults, validation (`load_config`).
- `scheduler.Scheduler`: informers in, bindings/conditions/Events out; `schedule_one(now)`,
  `run_until_idle(now)`.
- `framework.Framework`: one profile's plugins run over the numpy `snapshot.NodeSnapshot`.
- `extender.ExtenderService` / `make_app`: the kube-scheduler extender protocol.
"""
