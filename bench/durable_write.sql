INSERT INTO bench.one_write (client_id) VALUES (:client_id);
