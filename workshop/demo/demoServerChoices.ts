/**
 * The choices of `demo --servers`, apart from the code that starts servers so that the CLI's
 * option parsing loads nothing else.
 */

/** Which servers the demo runs on: private ones of its own, or those the environment names. */
export type DemoServerChoice = 'private' | 'existing';
/** The choices of `demo --servers`, the default first. */
export const DEMO_SERVER_CHOICES: readonly DemoServerChoice[] = ['private', 'existing'];
