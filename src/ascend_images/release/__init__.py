"""Publishing images and the CI that does it: the registry client, push and manifest lists, image metadata,
the workflow's job matrices and the NPU gate. Imports every wing below it; `builder` it does not need."""
