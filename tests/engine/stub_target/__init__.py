"""A target that exists only in the tests: rented "stub" machines of one flavor per node group.
It is laid out as a real target is (schema, compile and runtime parts, each importing only its
own layer), so `test_new_target.py` can show what adding a target takes."""
