/**
 * The id of a row the core creates (a job, a file): a time-ordered UUID (version 7), as the
 * tables' defaults make them (migration `0011_time_ordered_ids`), so that the index entries of
 * recent rows sit together whatever the size of the history (docs/performance.md, "History and
 * its indexes").
 */
export { v7 as newId } from 'uuid';
