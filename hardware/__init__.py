"""Adapters from robot SDKs to the deploy topics, and simulated stand-ins that play the robot in tests."""
