-- name: GetOrder :one
SELECT id, customer_id, amount_cents, currency, status, charge_id FROM orders WHERE id = $1;

-- name: MarkOrderPaid :execrows
UPDATE orders SET status = 'paid', charge_id = $2 WHERE id = $1 AND status = 'pending';
