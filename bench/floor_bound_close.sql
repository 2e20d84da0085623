SELECT bench.floor_bound_close(n::text, 'bound-key-' || n, 'b-' || :client_id) FROM (SELECT nextval('bench.orders') AS n) s;
