/** The lifecycle, pure. See recognitionJob.machine.ts. */
export * from './statuses.js';
export * from './recognitionJob.types.js';
export * from './recognitionJob.machine.js';
export * from './decide.js';
export * from './unlockedDecision.js';
