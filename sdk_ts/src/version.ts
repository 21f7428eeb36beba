/**
 * The release of this package: one number for the contract and the Python, Go and TypeScript kits
 * (VERSION at the repository's root; tools/versions.py keeps every copy equal with package.json's).
 */
export const VERSION = "1.1.0";
