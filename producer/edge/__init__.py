"""The producer's gRPC edge: the server and its options, the servicer (``Open``,
``Cancel``), the methods' bounded deserializers, health, who may connect (TLS, tokens),
stream admission and connection ages. Everything below it reads checked values, never
gRPC's."""
