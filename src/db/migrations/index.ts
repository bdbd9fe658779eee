/**
 * Every migration, in order. Listed in code (not read from a folder) so the compiled daemon and
 * the tests run exactly the same set. Add a new one at the end; never edit an applied one.
 */
import type { Migration } from 'kysely';
import * as m0001 from './0001_initial.js';
import * as m0002 from './0002_legal_edges.js';
import * as m0003 from './0003_step_versions.js';
import * as m0004 from './0004_edge_check_in_when.js';
import * as m0005 from './0005_failed_jobs_index.js';
import * as m0006 from './0006_job_trace_context.js';
import * as m0007 from './0007_quarantine_service_mismatch.js';
import * as m0010 from './0010_retention_indexes.js';
import * as m0011 from './0011_time_ordered_ids.js';
import * as m0012 from './0012_transition_fillfactor.js';
import * as m0013 from './0013_step_write_rows.js';
import * as m0014 from './0014_step_write_assigned.js';
import * as m0015 from './0015_step_write_details.js';
import * as m0016 from './0016_step_write_places.js';
import * as m0017 from './0017_retention_functions.js';
import * as m0018 from './0018_quarantine_result_object.js';
import * as m0019 from './0019_transition_edge_statistics.js';
import * as m0020 from './0020_audit.js';
import * as m0021 from './0021_transition_rollup.js';

export const migrations: Record<string, Migration> = {
  '0001_initial': m0001,
  '0002_legal_edges': m0002,
  '0003_step_versions': m0003,
  '0004_edge_check_in_when': m0004,
  '0005_failed_jobs_index': m0005,
  '0006_job_trace_context': m0006,
  '0007_quarantine_service_mismatch': m0007,
  '0010_retention_indexes': m0010,
  '0011_time_ordered_ids': m0011,
  '0012_transition_fillfactor': m0012,
  '0013_step_write_rows': m0013,
  '0014_step_write_assigned': m0014,
  '0015_step_write_details': m0015,
  '0016_step_write_places': m0016,
  '0017_retention_functions': m0017,
  '0018_quarantine_result_object': m0018,
  '0019_transition_edge_statistics': m0019,
  '0020_audit': m0020,
  '0021_transition_rollup': m0021,
};
