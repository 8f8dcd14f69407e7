-- Whether any limit policy exists (the fast claim path claims nothing while one does).
SELECT EXISTS (SELECT 1 FROM drover.limits)
