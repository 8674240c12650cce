"""Leader election on a coordination.k8s.io/v1 Lease (client-go's tools/leaderelection):
leaderelection.py (`LeaderElector`), and podlabel.py (the leader's pod label, which the progress
Service selects).
"""

from controller.leaderelection.leaderelection import LeaderElectionConfig, LeaderElector

__all__ = ["LeaderElectionConfig", "LeaderElector"]
