-- The database clock, the store's only clock (docs/design.md section 9).
SELECT now()
