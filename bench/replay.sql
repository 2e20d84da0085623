SELECT toolgate.request_close(:token, 'replay-' || :client_id,
       jsonb_build_object('order_id', (900000001 + :client_id)::text, 'reason', 'benchmark close',
                          'idempotency_key', 'replay-' || :client_id));
