"""Task ``quadrotor-hover``: reach and hold a goal position (Crazyflie-class quadrotor)."""
