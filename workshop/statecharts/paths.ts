/**
 * Where the generated statecharts live. Apart from the generator, so that the CLI can show the
 * default of `statecharts --out` without loading the generator (Graphviz, the machine).
 */
import { resolve } from 'node:path';
import { packageRoot } from '../../src/packageInfo.js';

/** `visualizations/` of this package. */
export function defaultVisualizationsDir(): string {
  return resolve(packageRoot(), 'visualizations');
}
