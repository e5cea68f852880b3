package sink

// ReadObject is readObject for the package's external tests.
var ReadObject = readObject
