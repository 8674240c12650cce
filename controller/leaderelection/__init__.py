"""Leader election on a coordination.k8s.io/v1 Lease (client-go's tools/leaderelection)."""

from controller.leaderelection.leaderelection import LeaderElectionConfig, LeaderElector

__all__ = ["LeaderElectionConfig", "LeaderElector"]
