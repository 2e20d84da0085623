-- No wait for the WAL flush (about 4 ms here): what is measured is the token, not the disk.
SET synchronous_commit = off;
SELECT toolgate.read_order(:idtoken, '1');
