"""Simulation backends behind one batched interface (torch quadrotor dynamics; MuJoCo for legged robots)."""
