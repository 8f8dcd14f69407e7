-- The database clock, the store's only clock (DESIGN.md section 9).
SELECT now()
