"""What may be built, and with which environment: the matrix's schema and loader, version ordering, the
compatibility rules and the environment layers. The ground floor: imports no other wing."""
