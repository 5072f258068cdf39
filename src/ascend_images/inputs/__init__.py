"""Everything a build takes in: CANN packages and other downloads, their checksums and cache, PyPI and the backend
locks, OS base images, and what is newer upstream. Imports only `matrix`."""
