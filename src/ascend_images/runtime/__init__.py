"""Running and testing a built image: the device passthrough spec (the docker line, the compose service, the
Kubernetes Pod) and the image test runner with its JUnit report. Stands beside `matrix` on the ground floor:
imports no other wing."""
