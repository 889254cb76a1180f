"""ROS 2 deployment: lifecycle policy nodes running exported policies behind a safety layer."""
