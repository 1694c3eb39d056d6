-- A qlog cut at measure's in-memory bound (measure.QlogLimit): the stored bytes end with
-- the last complete record and a "doqscan:qlog_truncated" record; what came after is
-- lost. Rows written before this version were never cut (qlogs were unbounded then).
ALTER TABLE qlogs ADD COLUMN IF NOT EXISTS truncated boolean NOT NULL DEFAULT false;
